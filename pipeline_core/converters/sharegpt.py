"""ShareGPT rows: ``{"conversations": [{"from": "human", "value": ...}, ...], "system", "tools"}``.

Role mapping: human -> user, gpt -> assistant, system -> system, observation -> tool, and
function_call -> an assistant message whose content is ``tool_calls`` blocks. Every turn becomes
one message, in order. Column and tag names follow LLaMA-Factory's v0 ``columns`` / ``tags``.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
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
from pipeline_core.converters.media import NULL_MEDIA, attach_media
from pipeline_core.converters.options import override
from pipeline_core.converters.prelude import LEADING_SYSTEM, with_system
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import (
    Message,
    Role,
    SFTSample,
    message,
    text_message,
)
from pipeline_core.converters.tools import tool_call_blocks, tools_json
from pipeline_core.errors import RowError


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


def check_turn_order(turns: list[Any], tags: ShareGPTTags, field: str, ends_with_answer: bool = True) -> None:
    """LLaMA-Factory's v0 sharegpt rule, whose rows it drops otherwise: after an optional leading
    system turn, turns alternate (user or observation, then assistant or function_call), and a
    conversation ends with an answer (a preference pair's prompt, with an ask: its answers are the
    chosen and rejected turns). A RowError names the first turn out of place."""
    roles = [as_dict(turn, f"{field}[{i}]").get(tags.role_tag) for i, turn in enumerate(turns)]
    start = 1 if roles and tags.system_tag is not None and roles[0] == tags.system_tag else 0
    asks, answers = (tags.user_tag, tags.observation_tag), (tags.assistant_tag, tags.function_tag)
    for k, role in enumerate(roles[start:]):
        expected = asks if k % 2 == 0 else answers
        if role not in expected:
            at = f"{field}[{start + k}]"
            raise RowError(
                "invalid_turn_order",
                f"{at} is a {role!r} turn where the sharegpt format wants {'/'.join(t for t in expected if t)} "
                "(after an optional leading system turn, asks and answers alternate); LLaMA-Factory drops such rows",
                f"{at}.{tags.role_tag}",
            )
    if (len(roles) - start) % 2 == (0 if ends_with_answer else 1):
        return
    last = "an answer (assistant/function_call)" if ends_with_answer else "an ask (user/observation)"
    raise RowError(
        "invalid_turn_count",
        f"{field} has {len(roles) - start} turns after its system turn and must end with {last}; "
        "LLaMA-Factory drops such rows",
        field,
    )


@dataclass(frozen=True, slots=True)
class ShareGPTConverter:
    columns: ShareGPTColumns = ShareGPTColumns()
    tags: ShareGPTTags = ShareGPTTags()
    turn_order: bool = False  # check LLaMA-Factory's turn order (check_turn_order): set for its v0 entries
    leading_system: str = field(default=LEADING_SYSTEM, init=False)  # prelude.with_system's rule, keys outputs
    null_media: str = field(default=NULL_MEDIA, init=False)  # media.attach_media's rule, keys outputs

    def __call__(self, row: Mapping[str, Any]) -> SFTSample:
        row, cols = as_row(row), self.columns
        turns = required_turns(row, cols.messages)
        if self.turn_order:
            check_turn_order(turns, self.tags, cols.messages)
        messages = sharegpt_turns(turns, self.tags, cols.messages)
        tools = tools_json(row.get(cols.tools), cols.tools)
        messages = with_system(messages, optional_str(row, cols.system), tools)
        return {"messages": attach_media(messages, row, cols)}


@ConverterFactory.register("sharegpt")
def make_sharegpt(
    columns: Mapping[str, str] | None = None, tags: Mapping[str, str] | None = None, turn_order: bool = False
) -> ShareGPTConverter:
    return ShareGPTConverter(
        override(ShareGPTColumns(), columns, "sharegpt columns"),
        override(ShareGPTTags(), tags, "sharegpt tags"),
        bool(turn_order),
    )
