"""A raw message's ``name`` and ``tool_call_id``: no content, but chat templates may write them.

They are carried onto the v1 message as they are (sample.MESSAGE_FIELDS), so a template that reads
``message.name`` or ``message.tool_call_id`` renders what ``transformers.apply_chat_template`` renders
for the same row. A null is no value, as transformers drops null keys before rendering. A value
that is not a string, or a ``tool_call_id`` off a tool message, is a RowError naming the field.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import field as dataclass_field
from typing import Any

from pipeline_core.converters.fields import optional_str
from pipeline_core.converters.reasoning import RULE as REASONING_RULE
from pipeline_core.converters.sample import CONTENT_ABSENT, MESSAGE_FIELDS, MessageFields
from pipeline_core.errors import RowError

CARRIED = (*MESSAGE_FIELDS, CONTENT_ABSENT, REASONING_RULE)  # added 2026-12-06: a null content was
# carried as ""; 2026-12-07: reasoning under thinking/reasoning was dropped, and openai dropped "" reasoning


def message_fields(msg: Mapping[str, Any], role: str, field: str) -> MessageFields:
    """The fields of ``msg`` that the v1 message carries; ``field`` names ``msg`` in errors."""
    found = {key: optional_str(msg, key, f"{field}.{key}") for key in MESSAGE_FIELDS}
    if found["tool_call_id"] is not None and role != "tool":
        raise RowError(
            "invalid_tool_call",
            f"{field}.tool_call_id found on a {role!r} message; only a tool message (a tool result) answers "
            "a call: give the result role 'tool' or drop the field",
            f"{field}.tool_call_id",
        )
    return {key: value for key, value in found.items() if value is not None}  # type: ignore[return-value]


def carries_field() -> Any:
    """The ``carries`` field of a converter that carries these fields and the ``content_absent``
    mark (content_absent.py): CARRIED, not an option. It is in the converter's repr, which keys
    exported rows and cached outputs (sources/convert.py's ``converter_label``, the processors'
    ``describe``), so outputs made while they were dropped or refused are rebuilt, not reused."""
    return dataclass_field(default=CARRIED, init=False)
