"""The standard sample every converter produces: LLaMA-Factory's v1 messages format.

    {"messages": [{"role": "user", "content": [{"type": "text", "value": "hi"}], "loss_weight": 0.0},
                  {"role": "assistant", "content": [{"type": "text", "value": "hello"}],
                   "loss_weight": 1.0}]}

A message's content is an ordered list of typed blocks, so text, media references, tool
definitions and tool calls keep their relative order. A preference pair is two complete
conversations, ``{"chosen_messages": [...], "rejected_messages": [...]}``, that share their prompt.

A message may also carry the fields of ``MESSAGE_FIELDS``, which are no content but which a chat
template may write: ``name`` (any message: who speaks, as OpenAI's ``name``) and ``tool_call_id``
(a tool message: the call it answers). They are strings, present only when the data has them,
and handed to the template as they are (chat/messages.py):

    {"role": "tool", "content": [{"type": "text", "value": "21"}], "loss_weight": 0.0, "tool_call_id": "call_7"}

A message whose row gave no content (OpenAI's ``"content": null`` on a turn that only calls tools,
or no ``content`` key) carries ``"content_absent": true`` (``CONTENT_ABSENT``): it holds no text
block, and the template gets no ``content`` key, as transformers drops null keys before rendering
(chat/messages.py). A ``""`` content is a text block of ``""`` instead, which the template gets::

    {"role": "assistant", "content": [{"type": "tool_calls", "value": "{...}"}], "loss_weight": 1.0,
     "content_absent": true}
"""

from __future__ import annotations

from typing import Literal, NotRequired, TypedDict

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
MESSAGE_FIELDS: tuple[str, ...] = ("name", "tool_call_id")
CONTENT_ABSENT = "content_absent"


class ContentBlock(TypedDict):
    type: ContentType
    value: str


class MessageFields(TypedDict, total=False):
    """The optional fields of a message (MESSAGE_FIELDS); absent when the data has none."""

    name: str
    tool_call_id: str


class Message(MessageFields):
    role: Role
    content: list[ContentBlock]
    loss_weight: float
    content_absent: NotRequired[bool]  # True when present: the row gave no content (null or missing)


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


def message(
    role: Role,
    content: list[ContentBlock],
    loss_weight: float | None = None,
    fields: MessageFields | None = None,
    absent: bool = False,
) -> Message:
    """A v1 message; ``absent``: the row gave no content (marked ``content_absent``)."""
    weight = default_loss_weight(role) if loss_weight is None else float(loss_weight)
    marker = {CONTENT_ABSENT: True} if absent else {}
    return {"role": role, "content": content, "loss_weight": weight, **(fields or {}), **marker}


def text_message(role: Role, text: str) -> Message:
    return message(role, [block("text", text)])
