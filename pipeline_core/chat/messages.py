"""v1 messages -> the message dicts Jinja chat templates expect (the `transformers` conventions).

::

    {"role": "system" | "user" | "assistant" | "tool", "content": str}   ("content" absent: see below)
      + "reasoning_content", "thinking": str   when the message has reasoning blocks (joined; both names,
                                                as transformers aliases them for gpt-oss-style templates)
      + "tool_calls": [{"type": "function", "function": {"name": ..., "arguments": {...}}}, ...]
      + "name", "tool_call_id": str            when the message has them (sample.MESSAGE_FIELDS), as the
                                                row gave them, so a template that writes them renders them

``content`` joins the message's text blocks; media blocks are left out (the processor keeps them
apart). A message marked ``content_absent`` (its row's content was null or missing, as OpenAI
writes a turn that only calls tools) has no ``content`` key: transformers drops null keys before
rendering, so a template that tests ``message.content is defined`` / ``is string``, or fails on
``'...' + message.content``, does here what it does there (frames.py leaves such rows to Jinja).

``tools`` blocks become the template's ``tools`` variable (one list of definitions), and a system
message that held nothing but tools (not one the row gave with a null content) is dropped, as a
caller of ``apply_chat_template(messages, tools=...)`` would write it. ``owners[k]`` is the v1
index of template message ``k``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from pipeline_core.converters.sample import CONTENT_ABSENT, MESSAGE_FIELDS, Message
from pipeline_core.converters.tools import is_call, parse_json
from pipeline_core.errors import RowError


@dataclass(slots=True)
class TemplateConversation:
    messages: list[dict] = field(default_factory=list)
    owners: list[int] = field(default_factory=list)
    tools: list[Any] | None = None


def template_conversation(messages: list[Message]) -> TemplateConversation:
    conversation = TemplateConversation()
    for i, m in enumerate(messages):
        tools = _tools(m, i)
        if tools:
            conversation.tools = [*(conversation.tools or []), *tools]
        if _tools_only(m):
            continue
        conversation.messages.append(template_message(m, i))
        conversation.owners.append(i)
    return conversation


def template_message(message: Message, i: int) -> dict:
    out: dict[str, Any] = {"role": message["role"]}
    if not message.get(CONTENT_ABSENT):
        out["content"] = _joined(message, "text")
    if any(b["type"] == "reasoning" for b in message["content"]):
        reasoning = _joined(message, "reasoning")
        out = {"thinking": reasoning, **out, "reasoning_content": reasoning}  # transformers' key order
    calls = [
        _tool_call(b["value"], f"messages[{i}].content[{j}]")
        for j, b in enumerate(message["content"])
        if b["type"] == "tool_calls"
    ]
    if calls:
        out["tool_calls"] = calls
    return out | {key: message[key] for key in MESSAGE_FIELDS if key in message}


def _tools_only(message: Message) -> bool:
    """A system message holding only tools (the one converters add for them); one the row had with
    a null content is the row's, which transformers passes on without content."""
    return (
        message["role"] == "system"
        and not message.get(CONTENT_ABSENT)
        and all(b["type"] == "tools" for b in message["content"])
    )


def texts_of(message: Message) -> list[tuple[str, str]]:
    """Every string of a message that the template writes, with the field it comes from (``content``,
    ``name``, ``tool_call_id``): checked for special-token strings. A JSON block (tool calls, tools)
    counts twice: as written, and with its escapes undone, as a template's ``tojson`` writes it
    back (``"\\u003c|im_end|\\u003e"`` renders as ``<|im_end|>``)."""
    texts = [(key, message[key]) for key in MESSAGE_FIELDS if key in message]
    for b in message["content"]:
        if b["type"] in ("text", "reasoning"):
            texts.append(("content", b["value"]))
        elif b["type"] in ("tool_calls", "tools"):
            texts += [("content", b["value"]), ("content", _unescaped(b["value"]))]
    return texts


def _unescaped(value: str) -> str:
    try:
        return json.dumps(json.loads(value), ensure_ascii=False)
    except ValueError:  # not JSON: the block is refused when it is parsed
        return value


def _joined(message: Message, kind: str) -> str:
    return "".join(b["value"] for b in message["content"] if b["type"] == kind)


def _tool_call(value: str, where: str) -> dict:
    call = parse_json(value, where)
    if not isinstance(call, dict) or not is_call(call):
        raise RowError(
            "invalid_tool_call",
            f'{where} must be a tool call object like {{"name": ..., "arguments": ...}}, got {value[:80]!r}',
            where,
        )
    return call if "function" in call else {"type": "function", "function": call}


def _tools(message: Message, i: int) -> list[Any]:
    found: list[Any] = []
    for j, b in enumerate(message["content"]):
        if b["type"] == "tools":
            parsed = parse_json(b["value"], f"messages[{i}].content[{j}]")
            found += parsed if isinstance(parsed, list) else [parsed]
    return found
