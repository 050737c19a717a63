"""The standard sample every converter produces: LLaMA-Factory's v1 messages format.

    {"messages": [{"role": "user", "content": [{"type": "text", "value": "hi"}], "loss_weight": 0.0},
                  {"role": "assistant", "content": [{"type": "text", "value": "hello"}],
                   "loss_weight": 1.0}]}

A message's content is an ordered list of typed blocks, so text, media references, tool
definitions and tool calls keep their relative order. A preference pair is two complete
conversations, ``{"chosen_messages": [...], "rejected_messages": [...]}``, that share their prompt.
"""

from __future__ import annotations

from typing import Literal, TypedDict

Role = Literal["system", "user", "assistant", "tool"]
ContentType = Literal["text", "reasoning", "tools", "tool_calls", "image_url", "audio_url", "video_url"]

ROLES: tuple[str, ...] = ("system", "user", "assistant", "tool")
CONTENT_TYPES: tuple[str, ...] = (
    "text",
    "reasoning",
    "tools",
    "tool_calls",
    "image_url",
    "audio_url",
    "video_url",
)


class ContentBlock(TypedDict):
    type: ContentType
    value: str


class Message(TypedDict):
    role: Role
    content: list[ContentBlock]
    loss_weight: float


class SFTSample(TypedDict):
    messages: list[Message]


class PairSample(TypedDict):
    chosen_messages: list[Message]
    rejected_messages: list[Message]


class TextSample(TypedDict):
    text: str


def default_loss_weight(role: str) -> float:
    """Only the assistant's turns are trained on unless the data says otherwise."""
    return 1.0 if role == "assistant" else 0.0


def block(kind: ContentType, value: str) -> ContentBlock:
    return {"type": kind, "value": value}


def message(role: Role, content: list[ContentBlock], loss_weight: float | None = None) -> Message:
    weight = default_loss_weight(role) if loss_weight is None else float(loss_weight)
    return {"role": role, "content": content, "loss_weight": weight}


def text_message(role: Role, text: str) -> Message:
    return message(role, [block("text", text)])
