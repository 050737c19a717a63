"""Rendering a chat template with *traced* message contents: does the output use them only verbatim?

``render_traced(source, messages, ...)`` renders like ``render_chat_template``, but each content
that is a ``Traced`` string records every way the template looks at it. The template may only

- write it out (``{{ content }}``, ``str(content)``, ``|string``),
- concatenate it (``+``, ``~``: the result is traced too), and
- test its truth (``{% if content %}``: the caller fixes which contents are empty),
- derive a new content from a ``Content`` by a string method with literal arguments (``|trim``,
  ``.strip()``, ``lstrip('\n')``, ``replace('a', 'b')``...): a *derivation*, which a row computes
  the same way (template_reads.py, traced_strings.py),
- ask a ``Content`` itself a question a row can answer again (``startswith``/``endswith``/``is...``,
  ``in`` either way, ``==``/``!=`` with a literal): a *guard*, which holds the render to the rows
  answering so,

and anything else is *read*: a method or attribute (``.split()``, or ``.strip()`` and ``|trim`` of
a string made from a content), a comparison or hash (``==``, ``in``, ``|unique``), ``len``, indexing, iteration,
``%``/``*``, ``format``, ``int``/``float`` and ``repr``. Calling ``strftime_now`` or
``raise_exception`` is also recorded (the text would depend on the clock, or the template refuses).
A render that read nothing produced the same control flow whatever the contents are; what a
C-level transformation that reads no attribute could still do (``|tojson``, ``|e``) changes the
text of the contents, which the caller detects by finding each sentinel verbatim (chat/frames.py).

A string made *from* a traced content by C code that never asks it anything (``|join``,
``''.join([content])``, ``|tojson``, a macro's output) is traced in its turn: every filter and
every call the template makes returns a ``Traced`` string when its arguments hold a traced
content, so a later ``.startswith`` on it is a read. A filter or call that is handed a traced
content itself and returns anything but a string (``'abc'.startswith(content)``, ``|wordcount``)
has looked at it: a read. A container the check cannot look into (a generator, a custom object)
counts as holding one.

``content in 'some text'`` is a search of the literal that C code does without asking the content
anything, so the traced compile turns every ``in`` / ``not in`` into a call that records it
(``_traced_in``: a guard for a ``Content`` in a literal, else a read); a chain of comparisons holding one (``a < b in c``) counts as a read outright.
"""

from __future__ import annotations

import functools
from functools import lru_cache

from jinja2 import nodes
from jinja2.compiler import CodeGenerator
from jinja2.nodes import EvalContext
from jinja2.runtime import Context, Undefined

from pipeline_core.tokenizer.chat_template import compile_template
from pipeline_core.tokenizer.template_reads import Guard, Recording, record_guard, record_read
from pipeline_core.tokenizer.traced_strings import Content, Traced, plain, slot_of

_read = record_read  # what the hooks record of a traced content


def _traced_join(seq) -> str:
    """Jinja's ``~`` (``str_join``), keeping the trace when a part is traced."""
    parts = [str(x) for x in seq]
    out = "".join(parts)
    return Traced(out) if any(isinstance(p, Traced) for p in parts) else out


def _traced_raise(message: str):
    _read("raise_exception")
    from jinja2.exceptions import TemplateError

    raise TemplateError(message)


def _traced_now(fmt: str) -> str:
    _read("strftime_now")
    return ""


_PLAIN = (str, int, float, bool, type(None))
_JINJA = (EvalContext, Context, Undefined)  # what jinja passes a filter, never a content


def _holds_traced(value, depth: int = 0) -> bool:
    """Whether ``value`` is or may hold a traced content (unknown containers: yes)."""
    if isinstance(value, Traced):
        return True
    if isinstance(value, (*_PLAIN, *_JINJA)):
        return False
    if depth > 8:
        return True
    if isinstance(value, (list, tuple, set, frozenset)):
        return any(_holds_traced(v, depth + 1) for v in value)
    if isinstance(value, dict):
        return any(_holds_traced(k, depth + 1) or _holds_traced(v, depth + 1) for k, v in value.items())
    return not callable(value)  # a generator, a Namespace, an object: it may hold one


def _traced_result(name: str, args: tuple, kwargs: dict, result):
    """``result`` of a filter or call, traced when it may be made from a traced argument."""
    given = (*args, *kwargs.values())
    if isinstance(result, str) and not isinstance(result, Traced) and any(_holds_traced(a) for a in given):
        return Traced(str.__str__(result))
    if not isinstance(result, str) and any(isinstance(a, Traced) for a in given):
        _read(name)
    return result


def _traced_filter(name: str, func):
    @functools.wraps(func)  # keeps jinja's pass_context / pass_eval_context marks
    def traced(*args, **kwargs):
        return _traced_result(f"|{name}", args, kwargs, func(*args, **kwargs))

    return traced


def _traced_call(environment):
    base = environment.call

    def call(context, obj, *args, **kwargs):
        result = base(context, obj, *args, **kwargs)
        if getattr(obj, "__self__", None) is not None and isinstance(obj.__self__, Traced):
            return result  # a traced content's own method: it recorded itself
        return _traced_result(getattr(obj, "__name__", "call"), args, kwargs, result)

    return call


def _traced_in(item, container) -> bool:
    """``item in container``, a read when a traced content is searched for in a string (every
    other container asks the item itself: ``__eq__`` or ``__hash__``, which record themselves)."""
    if isinstance(item, Content) and plain(container):
        found = str.__contains__(container, item)
        record_guard(Guard(slot_of(item), "in literal", (container,), found))
        return found
    if isinstance(item, Traced) and isinstance(container, str):
        _read("in")
    return item in container


def _chain_read() -> bool:
    _read("in (in a chain of comparisons)")
    return False


class _TracingCodeGenerator(CodeGenerator):
    """Compiles ``a in b`` as ``environment.traced_in(a, b)`` (``not in`` negated)."""

    def visit_Compare(self, node: nodes.Compare, frame) -> None:
        ops = [op.op for op in node.ops]
        if "in" not in ops and "notin" not in ops:
            return super().visit_Compare(node, frame)
        if len(ops) > 1:
            self.write("(environment.traced_chain() or ")
            super().visit_Compare(node, frame)
            self.write(")")
            return None
        self.write("(not " if ops[0] == "notin" else "(")
        self.write("environment.traced_in(")
        self.visit(node.expr, frame)
        self.write(", ")
        self.visit(node.ops[0].expr, frame)
        self.write("))")
        return None


@lru_cache(maxsize=32)
def _traced_template(source: str):
    """A private compile of ``source`` whose ``~``, filters and calls keep traces and whose globals
    record their use (see the module docstring)."""
    shared = compile_template(source)
    environment = shared.environment.overlay()
    environment.filters = {name: _traced_filter(name, f) for name, f in environment.filters.items()}
    environment.call = _traced_call(environment)
    environment.code_generator_class = _TracingCodeGenerator
    environment.traced_in, environment.traced_chain = _traced_in, _chain_read
    template = environment.from_string(source)
    template.globals = {**template.globals, "raise_exception": _traced_raise, "strftime_now": _traced_now}
    template.root_render_func.__globals__["str_join"] = _traced_join
    return template


def render_traced(
    source: str, messages: list[dict], add_generation_prompt: bool, tools, **variables
) -> tuple[str | None, list[str], list[Guard]]:
    """(the rendered text, or None when the template raised; what it read of traced contents; the
    guards it asked of them)."""
    template = _traced_template(source)
    with Recording() as (reads, guards):
        try:
            text = template.render(
                messages=messages, tools=tools, add_generation_prompt=add_generation_prompt, **variables
            )
        except Exception:  # noqa: BLE001 - the template is user code; the caller renders the row normally
            return None, reads, guards
    return str.__str__(text), reads, guards
