"""A message's reasoning, under each name ``apply_chat_template`` reads it by.

transformers takes a message's reasoning from the first non-null of ``reasoning_content``,
``thinking`` and ``reasoning`` and hands it to the template as ``reasoning_content`` and
``thinking``; ``""`` is a reasoning too (Qwen3 then writes an empty think block). The openai and
messages converters carry it the same way, as one ``reasoning`` block ahead of the text. Two of
those names with different values are a RowError: a template reading the other name would
render what the block does not hold.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.converters.fields import as_str
from pipeline_core.converters.sample import ContentBlock, block
from pipeline_core.errors import RowError

REASONING_FIELDS = ("reasoning_content", "thinking", "reasoning")  # transformers' order
RULE = "reasoning:" + "|".join(REASONING_FIELDS) + ",empty_kept"  # in CARRIED: keys caches made before


def reasoning_blocks(msg: Mapping[str, Any], field: str) -> list[ContentBlock]:
    """``[reasoning block]`` from the message's reasoning, or ``[]`` when it has none."""
    found = {key: as_str(msg[key], f"{field}.{key}") for key in REASONING_FIELDS if msg.get(key) is not None}
    if len(set(found.values())) > 1:
        names = " and ".join(found)
        raise RowError(
            "conflicting_reasoning",
            f"{field} gives its reasoning twice, under {names}, with different texts; keep one of them",
            f"{field}.{next(iter(found))}",
        )
    return [block("reasoning", text) for text in list(found.values())[:1]]
