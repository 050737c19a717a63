"""Chat formats: how a conversation becomes format tokens and trainable text.

Owns the prompt strategies (their base in ``prompt``; ``chatml``, ``alpaca`` in ``strategies``, registered by name in ``registry``; ``template``, a model's own
Jinja chat template, in ``template``), the per-turn formatting they share (``turns``), the message
shapes a template is given (``messages``) and the rendered result (``pieces``: runs of user text and
of already-encoded markup, each marked as trained or not).

Importing this package registers every built-in strategy with ``StrategyFactory``.

May import: ``errors``, ``converters`` (the message types), ``tokenizer``, ``formats.ragged``.
"""

from pipeline_core.chat import template as _template  # noqa: F401  (registers "template")
from pipeline_core.chat.prompt import PromptStrategy
from pipeline_core.chat.registry import StrategyFactory
from pipeline_core.chat.strategies import AlpacaStrategy, ChatMLStrategy
from pipeline_core.chat.template import TemplateStrategy

__all__ = ["AlpacaStrategy", "ChatMLStrategy", "PromptStrategy", "StrategyFactory", "TemplateStrategy"]
