"""Alpaca rows: ``{"system", "instruction", "input", "output", "history": [[query, response], ...]}``.

Messages, in order: system (when present, with tools), each history pair as a user and an
assistant turn, the user turn ``instruction + "\\n" + input`` (just the instruction when input is
empty), and the assistant turn ``output``. Column names follow LLaMA-Factory's v0 ``columns``
(prompt, query, response, history, system, tools, images, videos, audios).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline_core.converters.fields import (
    as_list,
    as_row,
    as_str,
    optional_list,
    optional_str,
    required_str,
)
from pipeline_core.converters.media import NULL_MEDIA, attach_media
from pipeline_core.converters.options import override
from pipeline_core.converters.prelude import with_system
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import Message, SFTSample, text_message
from pipeline_core.converters.tools import tools_json
from pipeline_core.errors import RowError


@dataclass(frozen=True, slots=True)
class AlpacaColumns:
    prompt: str = "instruction"
    query: str = "input"
    response: str = "output"
    history: str = "history"
    system: str = "system"
    tools: str = "tools"
    images: str = "images"
    videos: str = "videos"
    audios: str = "audios"


def alpaca_prompt(row: Mapping[str, Any], cols: AlpacaColumns) -> list[Message]:
    """The history turns and the user turn: everything before the response."""
    return [*history_messages(row, cols.history), text_message("user", user_text(row, cols))]


def user_text(row: Mapping[str, Any], cols: AlpacaColumns) -> str:
    parts = (required_str(row, cols.prompt), optional_str(row, cols.query))
    text = "\n".join(part for part in parts if part)
    if not text.strip():
        raise RowError(
            "empty_text",
            f"{cols.prompt} (and {cols.query}) have no text; the user turn needs an instruction",
            cols.prompt,
        )
    return text


def history_messages(row: Mapping[str, Any], column: str) -> list[Message]:
    pairs = optional_list(row, column)
    return [m for i, pair in enumerate(pairs) for m in _history_pair(pair, f"{column}[{i}]")]


def _history_pair(value: Any, field: str) -> list[Message]:
    pair = as_list(value, field)
    if len(pair) != 2:
        raise RowError(
            "wrong_type",
            f"{field} must be a [query, response] pair, got {len(pair)} item(s)",
            field,
        )
    query, response = as_str(pair[0], f"{field}[0]"), as_str(pair[1], f"{field}[1]")
    return [text_message("user", query), text_message("assistant", response)]


def _response_text(row: Mapping[str, Any], column: str) -> str:
    text = required_str(row, column)
    if not text.strip():
        raise RowError("empty_text", f"{column} is empty; expected the assistant's response", column)
    return text


@dataclass(frozen=True, slots=True)
class AlpacaConverter:
    columns: AlpacaColumns = AlpacaColumns()
    null_media: str = field(default=NULL_MEDIA, init=False)  # media.attach_media's rule, keys outputs

    def __call__(self, row: Mapping[str, Any]) -> SFTSample:
        row, cols = as_row(row), self.columns
        messages = [
            *alpaca_prompt(row, cols),
            text_message("assistant", _response_text(row, cols.response)),
        ]
        tools = tools_json(row.get(cols.tools), cols.tools)
        messages = with_system(messages, optional_str(row, cols.system), tools)
        return {"messages": attach_media(messages, row, cols)}


@ConverterFactory.register("alpaca")
def make_alpaca(columns: Mapping[str, str] | None = None) -> AlpacaConverter:
    return AlpacaConverter(override(AlpacaColumns(), columns, "alpaca columns"))
