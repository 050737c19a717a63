"""PromptStrategy: the format tokens wrapped around a query and its response, or a conversation.

A strategy is four token runs, encoded once at construction::

    prompt   = prompt_prefix + query + prompt_suffix      (loss off)
    response = response + response_suffix                (loss on)

``assemble_prompt`` / ``assemble_response`` apply them to one sample; the ``*_batch`` forms apply
them to a whole Ragged batch with numpy.

``render_messages`` renders a whole v1 conversation (converters/sample.py) as pieces (pieces.py),
which is the path the processors take. A strategy made only of the runs renders user and
assistant text turns by repeating them; strategies.py and template.py render richer ones.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from pipeline_core.chat.pieces import Piece
from pipeline_core.converters.media import MEDIA_KINDS
from pipeline_core.converters.sample import MESSAGE_FIELDS, Message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.ragged import Ragged, concat_ragged, tile_rows
from pipeline_core.tokenizer.auto import AutoTokenizer

MEDIA_TYPES = tuple(kind.block_type for kind in MEDIA_KINDS)
# rule changed on 2026-12-06, in every built-in strategy's format_strings so outputs written before it
# get other cache keys: v1 messages carry ``name`` and ``tool_call_id`` (converters/message_fields.py),
# which the template strategy hands to the template, and rows with a tool_call_id, refused until
# then, are rendered by every strategy
MESSAGE_FIELDS_RULE = {"message_fields": ",".join(MESSAGE_FIELDS)}


class PromptStrategy(ABC):
    """Format tokens around query and response. Subclasses set the four runs in __init__."""

    trained_roles: frozenset[str] = frozenset({"assistant"})

    def __init__(self, tokenizer: AutoTokenizer) -> None:
        self.tokenizer = tokenizer
        self.prompt_prefix = np.zeros(0, dtype=np.int32)
        self.prompt_suffix = np.zeros(0, dtype=np.int32)
        self.response_suffix = np.zeros(0, dtype=np.int32)

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def format_strings(self) -> dict[str, str]:
        """The strategy's parameters as written, for output metadata."""

    def _encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode_markup(text), dtype=np.int32)

    def assemble_prompt(self, query_tokens: Sequence[int]) -> list[int]:
        return [*self.prompt_prefix.tolist(), *query_tokens, *self.prompt_suffix.tolist()]

    def assemble_response(self, response_tokens: Sequence[int]) -> list[int]:
        return [*response_tokens, *self.response_suffix.tolist()]

    def assemble_prompt_batch(self, queries: Ragged) -> Ragged:
        n = len(queries)
        return concat_ragged([tile_rows(self.prompt_prefix, n), queries, tile_rows(self.prompt_suffix, n)])

    def assemble_response_batch(self, responses: Ragged) -> Ragged:
        return concat_ragged([responses, tile_rows(self.response_suffix, len(responses))])

    def training_roles(self, roles: frozenset[str]) -> PromptStrategy:
        """A copy whose rendered targets are the turns of ``roles`` (a processor's train_roles);
        the strategy itself is unchanged. Only the assistant role, unless a subclass knows more."""
        if roles == self.trained_roles:
            return self
        if roles != frozenset({"assistant"}):
            raise ConfigError(f"the {self.name} strategy trains assistant turns only; train_roles={sorted(roles)}")
        return self

    def render_samples(self, messages: list[Message]) -> list[list[Piece]]:
        """The samples of one conversation: one (the template strategy may give one per turn)."""
        return [self.render_messages(messages)]

    def render_samples_batch(self, conversations: list[list[Message]]) -> list[list[list[Piece]] | RowError]:
        """``render_samples`` of each conversation, or the RowError it raised (a strategy may batch the work)."""
        out: list[list[list[Piece]] | RowError] = []
        for messages in conversations:
            try:
                out.append(self.render_samples(messages))
            except RowError as e:
                out.append(e)
        return out

    def render_messages(self, messages: list[Message]) -> list[Piece]:
        """The conversation as pieces; by default user/assistant text turns built from the runs."""
        pieces: list[Piece] = []
        for i, m in enumerate(messages):
            text = _plain_text(m, i, self.name)
            if m["role"] == "user":
                pieces += [Piece(ids=self.prompt_prefix, message=i), Piece(text, message=i)]
                pieces.append(Piece(ids=self.prompt_suffix, message=i))
            elif m["role"] == "assistant":
                pieces += [Piece(text, message=i, target=True), Piece(ids=self.response_suffix, message=i, target=True)]
            else:
                raise RowError(
                    "unsupported_role",
                    f"the {self.name} strategy only renders user/assistant turns, not {m['role']!r}; "
                    "use the chatml, alpaca or template strategy",
                    f"messages[{i}].role",
                )
        return pieces


def _plain_text(message: Message, i: int, strategy: str) -> str:
    for j, part in enumerate(message["content"]):
        if part["type"] != "text" and part["type"] not in MEDIA_TYPES:
            raise RowError(
                f"unsupported_content:{part['type']}",
                f"the {strategy} strategy renders text only; use chatml, alpaca or template for {part['type']} blocks",
                f"messages[{i}].content[{j}]",
            )
    return "".join(p["value"] for p in message["content"] if p["type"] == "text")
