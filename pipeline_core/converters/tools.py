"""Tool definitions and tool calls: validated JSON, carried as ``tools`` / ``tool_calls`` blocks."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from pipeline_core.converters.fields import json_type, optional_list
from pipeline_core.converters.sample import ContentBlock, block
from pipeline_core.errors import RowError


def dumps(value: Any) -> str:
    return json.dumps(value, ensure_ascii=False)


def parse_json(text: str, field: str) -> Any:
    try:
        return json.loads(text)
    except json.JSONDecodeError as exc:
        raise RowError(
            "invalid_json",
            f"{field} is not valid JSON ({exc.msg} at char {exc.pos}); fix the JSON text",
            field,
        ) from None


def tools_json(value: Any, field: str) -> str | None:
    """Tool definitions as a JSON string, or None when there are none (missing, "" or "[]").

    A string is validated and kept verbatim; a list or object is serialized.
    """
    if value is None or (isinstance(value, str) and not value.strip()):
        return None
    parsed = parse_json(value, field) if isinstance(value, str) else value
    if not isinstance(parsed, (list, dict)):
        raise RowError(
            "wrong_type",
            f"{field} must be a list of tool definitions (or its JSON string), got {json_type(parsed)}",
            field,
        )
    if not parsed:
        return None
    return value if isinstance(value, str) else dumps(value)


def tool_call_blocks(value: Any, field: str) -> list[ContentBlock]:
    """One ``tool_calls`` block per call; a single call given as a JSON string is kept verbatim.
    A call is an object with a ``name`` (or an OpenAI ``function``), else a RowError: the ``chatml``
    strategy would write any JSON, where a template (and LLaMA-Factory) refuses it."""
    parsed = parse_json(value, field) if isinstance(value, str) else value
    if isinstance(parsed, dict) and is_call(parsed):
        return [block("tool_calls", value if isinstance(value, str) else dumps(value))]
    if isinstance(parsed, list) and parsed and all(isinstance(c, dict) and is_call(c) for c in parsed):
        return [block("tool_calls", dumps(call)) for call in parsed]
    raise RowError(
        "invalid_tool_call",
        f'{field} must be a tool call object like {{"name": ..., "arguments": ...}} '
        f"or a non-empty list of them, got {_what(parsed)}",
        field,
    )


def _what(parsed: Any) -> str:
    if isinstance(parsed, dict):
        return "an object without a name (or function)"
    if isinstance(parsed, list) and parsed:
        return "a list with an item that is no such object"
    return json_type(parsed)


def message_tool_calls(msg: Mapping[str, Any], role: str, field: str) -> list[ContentBlock]:
    """The ``tool_calls`` list of an OpenAI-style message as ``tool_calls`` blocks; only an assistant calls tools."""
    calls = optional_list(msg, "tool_calls", f"{field}.tool_calls")
    if calls and role != "assistant":
        raise RowError(
            "invalid_tool_call",
            f"{field}.tool_calls found on a {role!r} message; only assistant messages call tools",
            f"{field}.tool_calls",
        )
    return [b for i, c in enumerate(calls) for b in tool_call_blocks(c, f"{field}.tool_calls[{i}]")]


def is_call(call: Mapping[str, Any]) -> bool:
    """A tool call object names its function, flat (``name``) or nested (``function``)."""
    return "name" in call or "function" in call
