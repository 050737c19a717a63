"""Jinja chat templates rendered the way `transformers` renders them.

Same environment settings (sandboxed, ``trim_blocks``, ``lstrip_blocks``, loop controls), the same
globals (``raise_exception``, ``strftime_now``) and ``tojson`` filter, and the special tokens passed
as variables, so a tokenizer_config.json template gives the same string here as in transformers.
``{% generation %}`` blocks are supported: the character spans they produce are recorded, which is
how the ``template`` strategy can find assistant text exactly.
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
    template = compile_template(source)
    texts: list[str] = []
    _recording.texts = texts
    try:
        rendered = template.render(messages=messages, add_generation_prompt=False, **variables)
    finally:
        _recording.texts = None
    return rendered, texts
