"""A message the row gave no content: OpenAI's ``"content": null`` (or no ``content`` key), kept as a marker.

transformers drops a message's null keys before rendering, so a chat template gets no ``content``
on such a turn (``message.content is defined`` and ``is string`` are false, ``'x' + message.content``
raises), while a ``""`` content is a string it gets. The v1 message keeps the difference as
``"content_absent": true`` (sample.CONTENT_ABSENT) with no text block, and chat/messages.py hands
the template no ``content`` for it. Exported JSONL writes the marker; the messages converter reads
it back here.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.converters.fields import json_type
from pipeline_core.converters.sample import CONTENT_ABSENT, ContentBlock
from pipeline_core.errors import RowError


def raw_content_absent(turn: Mapping[str, Any]) -> bool:
    """An OpenAI turn whose content is null or missing: transformers gives the template none."""
    return turn.get("content") is None


def marked_absent(msg: Mapping[str, Any], content: list[ContentBlock], field: str) -> bool:
    """A v1 message's ``content_absent``: true, or false when missing (or false, or null). True on a
    message with a text block contradicts the block, which the template would get: a RowError."""
    value, where = msg.get(CONTENT_ABSENT), f"{field}.{CONTENT_ABSENT}"
    if value is None or value is False:
        return False
    if value is not True:
        raise RowError("wrong_type", f"{where} must be true or false, got {json_type(value)}", where)
    if any(b["type"] == "text" for b in content):
        raise RowError(
            "invalid_value",
            f"{where} is true but the message has text blocks; drop {CONTENT_ABSENT} (the template gets "
            "the text) or the text blocks (the template gets no content, as for an OpenAI null content)",
            where,
        )
    return True
