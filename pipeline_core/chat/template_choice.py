"""Which chat templates a ``template`` strategy renders, and the kwargs it passes them.

``chosen_templates``: ``template=`` (a Jinja text, or the name of one of the tokenizer's named
templates) as the only ``default``, else the tokenizer's named templates (one must be
``default``), else its single ``chat_template``. ``checked_kwargs``: ``chat_template_kwargs`` that
leave the per-row variables alone and are plain JSON (they are recorded in the output).
"""

from __future__ import annotations

import json

from pipeline_core.errors import ConfigError
from pipeline_core.tokenizer.auto import AutoTokenizer


def chosen_templates(tokenizer: AutoTokenizer, template: str | None) -> dict[str, str]:
    """The templates by name (``default`` always among them), or a ConfigError saying what to pass."""
    named = dict(tokenizer.named_chat_templates)
    if template is not None:
        return {"default": named[template]} if template in named else {"default": template}
    if named:
        if "default" not in named:
            raise ConfigError(
                f"the tokenizer {tokenizer.source} has named chat templates {sorted(named)} and none is "
                "'default'; pass template=<name or Jinja text>"
            )
        return named
    if not tokenizer.chat_template:
        raise ConfigError(
            "the template strategy renders the tokenizer's chat_template, and this tokenizer has none: "
            "add 'chat_template' to tokenizer_config.json (or chat_template.jinja beside it), call "
            "set_chat_template(...), or pass template=..."
        )
    return {"default": tokenizer.chat_template}


def checked_kwargs(kwargs: dict | None) -> dict:
    """A copy of ``kwargs``, or a ConfigError: one sets a per-row variable, or is not plain JSON."""
    kwargs = dict(kwargs or {})
    taken = {"messages", "tools", "add_generation_prompt"} & set(kwargs)
    if taken:
        raise ConfigError(f"chat_template_kwargs cannot set {sorted(taken)}: the strategy passes them per row")
    try:
        json.dumps(kwargs)
    except TypeError as e:
        raise ConfigError(f"chat_template_kwargs must be plain JSON values (they are recorded): {e}") from None
    return kwargs
