"""Rows already in the v1 messages format, validated and normalized (loss_weight filled in).

Accepts an SFT sample ``{"messages": [...]}`` or a pair ``{"chosen_messages", "rejected_messages"}``.
Only the standard keys are kept: role, content and loss_weight on messages, the message lists on
the sample.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_core.converters.fields import (
    as_dict,
    as_row,
    json_type,
    lookup_role,
    required_list,
    required_str,
    required_turns,
)
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import (
    CONTENT_TYPES,
    ROLES,
    ContentBlock,
    Message,
    message,
)
from pipeline_core.errors import RowError

_ROLES = {role: role for role in ROLES}
PAIR_KEYS = ("chosen_messages", "rejected_messages")


def validate_message(value: Any, field: str) -> Message:
    msg = as_dict(value, field)
    role = lookup_role(required_str(msg, "role", f"{field}.role"), _ROLES, f"{field}.role")
    blocks = required_list(msg, "content", f"{field}.content")
    content = [_validate_block(b, f"{field}.content[{j}]") for j, b in enumerate(blocks)]
    return message(role, content, _loss_weight(msg.get("loss_weight"), f"{field}.loss_weight"))


def validate_messages(row: Mapping[str, Any], key: str) -> list[Message]:
    return [validate_message(m, f"{key}[{i}]") for i, m in enumerate(required_turns(row, key))]


def _validate_block(value: Any, field: str) -> ContentBlock:
    part = as_dict(value, field)
    kind = required_str(part, "type", f"{field}.type")
    if kind not in CONTENT_TYPES:
        raise RowError(
            "unknown_content_type",
            f"unknown content type {kind!r} in {field}.type; expected one of {'/'.join(CONTENT_TYPES)}",
            f"{field}.type",
        )
    return {"type": kind, "value": required_str(part, "value", f"{field}.value")}


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
    def __call__(self, row: Mapping[str, Any]) -> dict[str, list[Message]]:
        row = as_row(row)
        keys = PAIR_KEYS if "messages" not in row and any(k in row for k in PAIR_KEYS) else ("messages",)
        return {key: validate_messages(row, key) for key in keys}
