"""One conversation turn in any supported shape, recognised by its keys.

``{"from", "value"}`` (or any turn when ShareGPT tags are configured) is ShareGPT; ``{"role",
"content": [{"type", "value"}, ...]}`` is already v1; any other ``{"role", "content"}`` is OpenAI.
Used where a dataset may carry either shape, such as preference pairs.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.converters.fields import as_dict
from pipeline_core.converters.messages import validate_message
from pipeline_core.converters.openai import openai_turn
from pipeline_core.converters.sample import Message
from pipeline_core.converters.sharegpt import ShareGPTTags, sharegpt_turn


def any_turn(value: Any, field: str, tags: ShareGPTTags | None = None) -> Message:
    turn = as_dict(value, field)
    if tags is not None or "from" in turn:
        return sharegpt_turn(turn, tags or ShareGPTTags(), field)
    if _is_v1(turn):
        return validate_message(turn, field)
    return openai_turn(turn, field)


def any_turns(values: list[Any], field: str, tags: ShareGPTTags | None = None) -> list[Message]:
    return [any_turn(value, f"{field}[{i}]", tags) for i, value in enumerate(values)]


def _is_v1(turn: Mapping[str, Any]) -> bool:
    content = turn.get("content")
    return isinstance(content, list) and all(isinstance(b, Mapping) and "value" in b for b in content)
