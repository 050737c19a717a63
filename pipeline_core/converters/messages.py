"""Rows already in the v1 messages format, validated and normalized (loss_weight filled in).

Accepts an SFT sample ``{"messages": [...]}`` or a pair ``{"chosen_messages", "rejected_messages"}``.
Only the standard keys are kept: role, content and loss_weight on messages, the message lists on
the sample, and what a chat template renders:

- a row-level ``tools`` (LLaMA-Factory v1's JSON string, or a list) -> a ``tools`` block in the
  leading system message (one is added when there is none), as every other converter does;
- ``{"type": "tool_call", "value": json}`` (LLaMA-Factory v1's spelling) -> a ``tool_calls`` block;
- a message-level ``tool_calls`` list (the OpenAI shape) -> ``tool_calls`` blocks after the content,
  and ``reasoning_content`` (or ``thinking``, ``reasoning``: reasoning.py) -> a ``reasoning`` block before it;
- ``name`` (any message) and ``tool_call_id`` (a tool message) -> kept on the message as they are
  (message_fields.py), as the openai converter writes them, so exported rows read back unchanged;
- ``content_absent: true`` (the openai converter's mark of a null content) -> kept, on a message
  without text blocks (content_absent.py).

A message field that a template would render but that is not carried (``function_call``) is a
RowError (``uncarried_field``): the row is never rendered without it.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_core.converters.content_absent import marked_absent
from pipeline_core.converters.fields import (
    as_dict,
    as_row,
    json_type,
    lookup_role,
    required_list,
    required_str,
    required_turns,
)
from pipeline_core.converters.message_fields import carries_field, message_fields
from pipeline_core.converters.prelude import with_system
from pipeline_core.converters.reasoning import reasoning_blocks
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import (
    CONTENT_TYPES,
    ROLES,
    ContentBlock,
    Message,
    message,
)
from pipeline_core.converters.tools import message_tool_calls, tool_call_blocks, tools_json
from pipeline_core.errors import RowError

_ROLES = {role: role for role in ROLES}
PAIR_KEYS = ("chosen_messages", "rejected_messages")
UNCARRIED = ("function_call",)


def validate_message(value: Any, field: str) -> Message:
    msg = as_dict(value, field)
    _refuse_uncarried(msg, field)
    role = lookup_role(required_str(msg, "role", f"{field}.role"), _ROLES, f"{field}.role")
    blocks = required_list(msg, "content", f"{field}.content")
    content = [c for j, b in enumerate(blocks) for c in _validate_block(b, f"{field}.content[{j}]")]
    content = reasoning_blocks(msg, field) + content + message_tool_calls(msg, role, field)
    weight = _loss_weight(msg.get("loss_weight"), f"{field}.loss_weight")
    return message(role, content, weight, message_fields(msg, role, field), marked_absent(msg, content, field))


def validate_messages(row: Mapping[str, Any], key: str) -> list[Message]:
    """The conversation at ``row[key]``, with the row's ``tools`` carried into it."""
    messages = [validate_message(m, f"{key}[{i}]") for i, m in enumerate(required_turns(row, key))]
    return with_system(messages, None, tools_json(row.get("tools"), "tools"))


def _refuse_uncarried(msg: Mapping[str, Any], field: str) -> None:
    for key in UNCARRIED:
        if msg.get(key) is not None:
            raise RowError(
                "uncarried_field",
                f"{field}.{key} is rendered by chat templates but not carried by v1 messages; write the "
                "legacy function_call as a tool_calls list on the message, or drop the field",
                f"{field}.{key}",
            )


def _validate_block(value: Any, field: str) -> list[ContentBlock]:
    part = as_dict(value, field)
    kind = required_str(part, "type", f"{field}.type")
    if kind == "tool_call":  # LLaMA-Factory v1's spelling: one call (or a list) as JSON
        return tool_call_blocks(required_str(part, "value", f"{field}.value"), f"{field}.value")
    if kind not in CONTENT_TYPES:
        raise RowError(
            "unknown_content_type",
            f"unknown content type {kind!r} in {field}.type; expected one of {'/'.join(CONTENT_TYPES)}",
            f"{field}.type",
        )
    return [{"type": kind, "value": required_str(part, "value", f"{field}.value")}]


def _loss_weight(value: Any, field: str) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise RowError("wrong_type", f"{field} must be a number, got {json_type(value)}", field)
    if not math.isfinite(value):
        raise RowError("invalid_value", f"{field} must be a finite number, got {value}", field)
    return float(value)


@ConverterFactory.register("messages")
@dataclass(frozen=True, slots=True)
class MessagesConverter:
    carries: tuple[str, ...] = carries_field()

    def __call__(self, row: Mapping[str, Any]) -> dict[str, list[Message]]:
        row = as_row(row)
        keys = PAIR_KEYS if "messages" not in row and any(k in row for k in PAIR_KEYS) else ("messages",)
        return {key: validate_messages(row, key) for key in keys}
