"""Jinja chat templates rendered the way `transformers` renders them.

Same environment settings (sandboxed, ``trim_blocks``, ``lstrip_blocks``, loop controls), the same
globals (``raise_exception``, ``strftime_now``) and ``tojson`` filter, and the special tokens passed
as variables, so a tokenizer_config.json template gives the same string here as in transformers.
``{% generation %}`` blocks are supported: the texts they produce are recorded and, with
``render_with_generation_spans``, their character spans in the output, which is how the
``template`` strategy finds assistant text exactly. Spans are located by wrapping each block's
output in two private-use characters (U+E000, U+E001) while rendering and removing them after.
"""

from __future__ import annotations

import json
import threading
from datetime import datetime
from functools import lru_cache

from jinja2 import nodes
from jinja2.exceptions import TemplateError
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

_recording = threading.local()  # per-thread list of generation texts while recording
SPAN_START, SPAN_END = "\ue000", "\ue001"  # wrap generation output while locating spans


def _raise_exception(message: str):
    raise TemplateError(message)


def _tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False) -> str:
    return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators, sort_keys=sort_keys)


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class GenerationSpans(Extension):
    """``{% generation %}...{% endgeneration %}``: renders its body and records its span."""

    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        call = self.call_method("_record", [], [], None, None, lineno=lineno)
        return nodes.CallBlock(call, [], [], body).set_lineno(lineno)

    def _record(self, caller) -> str:
        text = caller()
        spans = getattr(_recording, "texts", None)
        if spans is not None:
            spans.append(text)
            if getattr(_recording, "mark", False):
                return SPAN_START + text + SPAN_END
        return text


@lru_cache(maxsize=32)
def compile_template(source: str):
    env = ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationSpans, loopcontrols]
    )
    env.filters["tojson"] = _tojson
    env.globals["raise_exception"] = _raise_exception
    env.globals["strftime_now"] = _strftime_now
    return env.from_string(source)


def render_chat_template(
    source: str,
    messages: list[dict],
    add_generation_prompt: bool = False,
    tools: list[dict] | None = None,
    **variables,
) -> str:
    template = compile_template(source)
    return template.render(messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **variables)


def render_with_generation_texts(source: str, messages: list[dict], **variables) -> tuple[str, list[str]]:
    """Render and also return the texts produced inside ``{% generation %}`` blocks, in order."""
    return _render_recording(source, messages, mark=False, variables=variables)


def render_with_generation_spans(
    source: str, messages: list[dict], tools: list[dict] | None = None, **variables
) -> tuple[str, list[tuple[int, int]]]:
    """Render; also return the ``[start, end)`` character spans of the ``{% generation %}`` output."""
    marked, texts = _render_recording(source, messages, mark=True, variables={"tools": tools, **variables})
    return _strip_marks(marked, texts)


def _render_recording(source: str, messages: list[dict], mark: bool, variables: dict) -> tuple[str, list[str]]:
    template = compile_template(source)
    texts: list[str] = []
    _recording.texts, _recording.mark = texts, mark
    try:
        rendered = template.render(messages=messages, add_generation_prompt=False, **variables)
    finally:
        _recording.texts, _recording.mark = None, False
    return rendered, texts


def _strip_marks(marked: str, texts: list[str]) -> tuple[str, list[tuple[int, int]]]:
    parts, spans, pos, length = [], [], 0, 0
    for text in texts:
        start = marked.find(SPAN_START, pos)
        end = start + 1 + len(text)
        if start < 0 or marked[start + 1 : end] != text or marked[end : end + 1] != SPAN_END:
            raise ValueError(
                "cannot locate the {% generation %} output in the rendered text: the data contains "
                "U+E000/U+E001, or the template nests or filters generation blocks"
            )
        parts.append(marked[pos:start])
        length += start - pos
        spans.append((length, length + len(text)))
        parts.append(text)
        length += len(text)
        pos = end + 1
    rest = marked[pos:]
    if SPAN_START in rest or SPAN_END in rest:
        raise ValueError("the rendered text contains U+E000/U+E001 outside {% generation %} blocks; remove them")
    return "".join(parts) + rest, spans
