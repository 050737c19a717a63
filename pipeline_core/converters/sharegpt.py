"""ShareGPT rows: ``{"conversations": [{"from": "human", "value": ...}, ...], "system", "tools"}``.

Role mapping: human -> user, gpt -> assistant, system -> system, observation -> tool, and
function_call -> an assistant message whose content is ``tool_calls`` blocks. Every turn becomes
one message, in order. Column and tag names follow LLaMA-Factory's v0 ``columns`` / ``tags``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pipeline_core.converters.fields import (
    as_dict,
    as_row,
    lookup_role,
    optional_str,
    require,
    required_str,
    required_turns,
)
from pipeline_core.converters.media import attach_media
from pipeline_core.converters.options import override
from pipeline_core.converters.prelude import with_system
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import (
    Message,
    Role,
    SFTSample,
    message,
    text_message,
)
from pipeline_core.converters.tools import tool_call_blocks, tools_json


@dataclass(frozen=True, slots=True)
class ShareGPTColumns:
    messages: str = "conversations"
    system: str = "system"
    tools: str = "tools"
    images: str = "images"
    videos: str = "videos"
    audios: str = "audios"


@dataclass(frozen=True, slots=True)
class ShareGPTTags:
    role_tag: str = "from"
    content_tag: str = "value"
    user_tag: str = "human"
    assistant_tag: str = "gpt"
    system_tag: str = "system"
    function_tag: str = "function_call"
    observation_tag: str = "observation"

    def roles(self) -> dict[str, Role]:
        """Role of each tag; a tag set to None (off, see converters/dataset_info.py) matches no turn."""
        roles = {
            self.user_tag: "user",
            self.assistant_tag: "assistant",
            self.system_tag: "system",
            self.function_tag: "assistant",
            self.observation_tag: "tool",
        }
        return {tag: role for tag, role in roles.items() if tag is not None}


def sharegpt_turn(turn: Any, tags: ShareGPTTags, field: str) -> Message:
    turn = as_dict(turn, field)
    role_field, value_field = f"{field}.{tags.role_tag}", f"{field}.{tags.content_tag}"
    role = lookup_role(required_str(turn, tags.role_tag, role_field), tags.roles(), role_field)
    if turn[tags.role_tag] == tags.function_tag:
        calls = tool_call_blocks(require(turn, tags.content_tag, value_field), value_field)
        return message("assistant", calls)
    return text_message(role, required_str(turn, tags.content_tag, value_field))


def sharegpt_turns(turns: list[Any], tags: ShareGPTTags, field: str) -> list[Message]:
    return [sharegpt_turn(turn, tags, f"{field}[{i}]") for i, turn in enumerate(turns)]


@dataclass(frozen=True, slots=True)
class ShareGPTConverter:
    columns: ShareGPTColumns = ShareGPTColumns()
    tags: ShareGPTTags = ShareGPTTags()

    def __call__(self, row: Mapping[str, Any]) -> SFTSample:
        row, cols = as_row(row), self.columns
        turns = required_turns(row, cols.messages)
        messages = sharegpt_turns(turns, self.tags, cols.messages)
        tools = tools_json(row.get(cols.tools), cols.tools)
        messages = with_system(messages, optional_str(row, cols.system), tools)
        return {"messages": attach_media(messages, row, cols)}


@ConverterFactory.register("sharegpt")
def make_sharegpt(columns: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None) -> ShareGPTConverter:
    return ShareGPTConverter(
        override(ShareGPTColumns(), columns, "sharegpt columns"),
        override(ShareGPTTags(), tags, "sharegpt tags"),
    )
