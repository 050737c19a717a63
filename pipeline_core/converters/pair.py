"""Preference pairs -> ``{"chosen_messages": [...], "rejected_messages": [...]}``.

Both conversations are complete and share the prompt turns. Accepted shapes:

- a prompt plus ``chosen``/``rejected`` responses. The prompt is a conversation
  (``conversations``/``messages``, or a list in ``prompt``) or alpaca text (``prompt`` or
  ``instruction`` + ``input``, with optional ``history``). A response is a string (the assistant's
  text), one turn (``{"from": "gpt", "value": ...}`` as in LLaMA-Factory's dpo_en_demo, or
  ``{"role": "assistant", ...}``) or a list of turns continuing the prompt;
- no prompt and ``chosen``/``rejected`` as full conversations (lists of turns).

``system``/``tools`` columns and media columns apply to both sides. OpenAI and v1 turns keep their
``name`` and a tool turn its ``tool_call_id`` (message_fields.py), and the mark of a null content
(content_absent.py).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

from pipeline_core.converters.alpaca import AlpacaColumns, alpaca_prompt
from pipeline_core.converters.fields import (
    as_row,
    json_type,
    optional_str,
    require,
    required_turns,
)
from pipeline_core.converters.media import NULL_MEDIA, attach_media
from pipeline_core.converters.message_fields import carries_field
from pipeline_core.converters.options import override
from pipeline_core.converters.prelude import LEADING_SYSTEM, with_system
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import Message, PairSample, text_message
from pipeline_core.converters.sharegpt import ShareGPTTags, check_turn_order
from pipeline_core.converters.tools import tools_json
from pipeline_core.converters.turns import any_turn, any_turns
from pipeline_core.errors import ConfigError, RowError

PromptFrom = Literal["either", "alpaca", "sharegpt"]
PROMPT_FROM = ("either", "alpaca", "sharegpt")


@dataclass(frozen=True, slots=True)
class PairColumns:
    messages: str | None = None  # unset: "conversations", then "messages"
    prompt: str | None = None  # unset: "prompt", then "instruction"
    query: str = "input"
    history: str = "history"
    system: str = "system"
    tools: str = "tools"
    chosen: str = "chosen"
    rejected: str = "rejected"
    images: str = "images"
    videos: str = "videos"
    audios: str = "audios"

    def messages_keys(self) -> tuple[str, ...]:
        return (self.messages,) if self.messages else ("conversations", "messages")

    def prompt_keys(self) -> tuple[str, ...]:
        return (self.prompt,) if self.prompt else ("prompt", "instruction")


@dataclass(frozen=True, slots=True)
class PairConverter:
    columns: PairColumns = PairColumns()
    tags: ShareGPTTags | None = None  # set: every turn is read as ShareGPT with these tags
    turn_order: bool = False  # a ShareGPT prompt follows LLaMA-Factory's turn order (sharegpt.check_turn_order)
    carries: tuple[str, ...] = carries_field()  # an OpenAI or v1 turn's name/tool_call_id/content_absent (turns.py)
    # where the prompt is read: "either" shape, or only LLaMA-Factory's entry's formatting ("alpaca":
    # instruction + input, never a conversations/messages column; "sharegpt": only the conversation)
    prompt_from: PromptFrom = "either"
    leading_system: str = field(default=LEADING_SYSTEM, init=False)  # prelude.with_system's rule, keys outputs
    null_media: str = field(default=NULL_MEDIA, init=False)  # media.attach_media's rule, keys outputs

    def __call__(self, row: Mapping[str, Any]) -> PairSample:
        row, cols = as_row(row), self.columns
        return {
            "chosen_messages": self._side(row, cols.chosen),
            "rejected_messages": self._side(row, cols.rejected),
        }

    def _side(self, row: Mapping[str, Any], key: str) -> list[Message]:
        cols = self.columns
        messages = [*self._prompt(row, key), *self._response(row, key)]
        tools = tools_json(row.get(cols.tools), cols.tools)
        messages = with_system(messages, optional_str(row, cols.system), tools)
        return attach_media(messages, row, cols)

    def _prompt(self, row: Mapping[str, Any], side: str) -> list[Message]:
        cols = self.columns
        conversation = cols.messages_keys() if self.prompt_from != "alpaca" else ()
        alpaca_text = cols.prompt_keys() if self.prompt_from != "sharegpt" else ()
        key = _first_present(row, conversation) or _first_present(row, alpaca_text)
        if key is None:
            _require_full_conversation(row, side, (*conversation, *alpaca_text))
            return []
        if isinstance(row[key], list):
            turns = required_turns(row, key)
            if self.turn_order:
                check_turn_order(turns, self.tags or ShareGPTTags(), key, ends_with_answer=False)
            return any_turns(turns, key, self.tags)
        alpaca = AlpacaColumns(prompt=key, query=cols.query, history=cols.history)
        return alpaca_prompt(row, alpaca)

    def _response(self, row: Mapping[str, Any], key: str) -> list[Message]:
        value = require(row, key, key)
        if isinstance(value, str):
            return [text_message("assistant", value)]
        if isinstance(value, list):
            return any_turns(required_turns(row, key), key, self.tags)
        if isinstance(value, Mapping):
            return [any_turn(value, key, self.tags)]
        raise RowError(
            "wrong_type",
            f"{key} must be a string, a turn object or a list of turns, got {json_type(value)}",
            key,
        )


def _first_present(row: Mapping[str, Any], keys: tuple[str, ...]) -> str | None:
    return next((key for key in keys if row.get(key) is not None), None)


def _require_full_conversation(row: Mapping[str, Any], side: str, looked_for: tuple[str, ...]) -> None:
    if not isinstance(row.get(side), list):
        expected = "/".join(looked_for)
        raise RowError(
            "missing_field",
            f"no prompt found (looked for {expected}) and {side} is not a full conversation; "
            "give a prompt column or make chosen/rejected lists of turns",
            side,
        )


@ConverterFactory.register("pair", "dpo")
def make_pair(
    columns: Mapping[str, str] | None = None,
    tags: Mapping[str, str] | None = None,
    turn_order: bool = False,
    prompt_from: str = "either",
) -> PairConverter:
    if prompt_from not in PROMPT_FROM:
        raise ConfigError(f"prompt_from must be one of {', '.join(PROMPT_FROM)}, got {prompt_from!r}")
    sharegpt_tags = override(ShareGPTTags(), tags, "sharegpt tags") if tags else None
    columns_ = override(PairColumns(), columns, "pair columns")
    return PairConverter(columns_, sharegpt_tags, bool(turn_order), prompt_from)  # type: ignore[arg-type]
