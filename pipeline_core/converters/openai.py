"""OpenAI chat rows: ``{"messages": [{"role": ..., "content": ..., "tool_calls": [...]}], "tools"}``.

``content`` may be a string, null (an assistant turn that only calls tools) or a list of OpenAI
content parts (``text``, ``image_url``, ``video_url``, ``audio_url``). A null or missing content
marks the message ``content_absent`` (content_absent.py): the template gets no ``content`` for it,
as from transformers, while ``""`` is an empty text it gets. ``reasoning_content`` (or
``thinking``, ``reasoning``: reasoning.py) on an assistant turn becomes a ``reasoning`` block ahead of its text; ``tool_calls`` follow the text.
A message's ``name`` and a tool message's ``tool_call_id`` are carried as they are
(message_fields.py), for the chat templates that write them.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from pipeline_core.converters.content_absent import raw_content_absent
from pipeline_core.converters.fields import (
    as_dict,
    as_row,
    as_str,
    json_type,
    lookup_role,
    required_str,
    required_turns,
)
from pipeline_core.converters.media import NULL_MEDIA, attach_media
from pipeline_core.converters.message_fields import carries_field, message_fields
from pipeline_core.converters.options import override
from pipeline_core.converters.prelude import with_system
from pipeline_core.converters.reasoning import reasoning_blocks
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import (
    ROLES,
    ContentBlock,
    Message,
    SFTSample,
    block,
    message,
)
from pipeline_core.converters.tools import message_tool_calls, tools_json
from pipeline_core.errors import RowError

_ROLES = {role: role for role in ROLES}
_MEDIA_PARTS = ("image_url", "video_url", "audio_url")


@dataclass(frozen=True, slots=True)
class OpenAIColumns:
    messages: str = "messages"
    tools: str = "tools"
    images: str = "images"
    videos: str = "videos"
    audios: str = "audios"


def openai_turn(turn: Any, field: str) -> Message:
    turn = as_dict(turn, field)
    role = lookup_role(required_str(turn, "role", f"{field}.role"), _ROLES, f"{field}.role")
    content = [*reasoning_blocks(turn, field), *_content(turn.get("content"), f"{field}.content")]
    content += message_tool_calls(turn, role, field)
    absent = raw_content_absent(turn)
    if not content and absent:
        raise RowError("missing_field", f"{field} has neither content nor tool_calls", f"{field}.content")
    return message(role, content, fields=message_fields(turn, role, field), absent=absent)


def openai_turns(turns: list[Any], field: str) -> list[Message]:
    return [openai_turn(turn, f"{field}[{i}]") for i, turn in enumerate(turns)]


def _content(value: Any, field: str) -> list[ContentBlock]:
    if value is None:
        return []
    if isinstance(value, str):
        return [block("text", value)]
    if isinstance(value, list):
        return [_part(part, f"{field}[{i}]") for i, part in enumerate(value)]
    raise RowError("wrong_type", f"{field} must be a string or a list of parts, got {json_type(value)}", field)


def _part(part: Any, field: str) -> ContentBlock:
    part = as_dict(part, field)
    kind = required_str(part, "type", f"{field}.type")
    if kind == "text":
        return block("text", required_str(part, "text", f"{field}.text"))
    if kind in _MEDIA_PARTS:
        return block(kind, _url(part.get(kind), f"{field}.{kind}"))
    raise RowError(
        "unknown_content_type",
        f"unknown content part type {kind!r} in {field}.type; expected text/{'/'.join(_MEDIA_PARTS)}",
        f"{field}.type",
    )


def _url(value: Any, field: str) -> str:
    if isinstance(value, Mapping):
        return required_str(value, "url", f"{field}.url")
    return as_str(value, field)


@dataclass(frozen=True, slots=True)
class OpenAIConverter:
    columns: OpenAIColumns = OpenAIColumns()
    carries: tuple[str, ...] = carries_field()
    null_media: str = field(default=NULL_MEDIA, init=False)  # media.attach_media's rule, keys outputs

    def __call__(self, row: Mapping[str, Any]) -> SFTSample:
        row, cols = as_row(row), self.columns
        messages = openai_turns(required_turns(row, cols.messages), cols.messages)
        messages = with_system(messages, None, tools_json(row.get(cols.tools), cols.tools))
        return {"messages": attach_media(messages, row, cols)}


@ConverterFactory.register("openai")
def make_openai(columns: Mapping[str, str] | None = None) -> OpenAIConverter:
    return OpenAIConverter(override(OpenAIColumns(), columns, "openai columns"))
