"""The traced strings a traced render (template_trace.py) hands a template as message contents.

``Traced``: a string whose every use but output, concatenation and truth is recorded as a read.
``Content``: a message content itself (one sentinel of chat/frames.py, for message ``slot``), whose
questions a row can answer again are recorded as guards instead (template_reads.py).
"""

from __future__ import annotations

import functools

from pipeline_core.tokenizer.template_reads import ANSWERS, IDENTITIES, SAME, Guard, record_guard, record_read


def _reading(name: str):
    base = getattr(str, name)

    def method(self, *args, **kwargs):
        record_read(name)
        return base(self, *args, **kwargs)

    method.__name__ = name
    return method


class Traced(str):
    """A content whose every use but output, concatenation and truth is recorded as a read."""

    __slots__ = ()

    def __str__(self) -> str:
        return self

    def __add__(self, other):
        return Traced(str.__add__(self, other))

    def __radd__(self, other):
        if not isinstance(other, str):
            return NotImplemented
        return Traced(str.__add__(other, self))

    def __bool__(self) -> bool:
        return str.__len__(self) > 0

    def __getattribute__(self, name: str):
        if not name.startswith("_"):
            record_read(name)
        return str.__getattribute__(self, name)

    def __int__(self):
        record_read("int")
        return int(str.__str__(self))

    def __float__(self):
        record_read("float")
        return float(str.__str__(self))

    def __index__(self):
        record_read("index")
        raise TypeError("a string is not an index")


for _name in (
    "__len__", "__eq__", "__ne__", "__lt__", "__le__", "__gt__", "__ge__", "__hash__", "__contains__",
    "__getitem__", "__iter__", "__mod__", "__rmod__", "__mul__", "__rmul__", "__format__", "__repr__",
):  # fmt: skip
    setattr(Traced, _name, _reading(_name))


class Content(Traced):
    """A traced message content (message ``slot``) whose ``strip()`` (``|trim``) is the traced text
    ``stripped``: it stands for the content stripped, which the caller substitutes per row.

    A question asked of the content itself whose answer can be asked again of a row is a *guard*
    (tokenizer/template_reads.py), not a read: a bool method or operator with literal operands
    (``startswith``, ``in``, ``==``...), and a string method that returns the content unchanged
    (``lstrip('\\n')`` of a content starting with no newline), which returns this very Content so
    that what the template asks of the result is guarded too. Anything else is a read."""

    def __new__(cls, text: str, stripped: str, slot: int) -> Content:
        made = super().__new__(cls, text)
        made.__dict__.update(stripped=stripped, slot=slot)
        return made

    def __getattribute__(self, name: str):
        if name == "strip":
            return str.__getattribute__(self, name)
        if name in ANSWERS or name in IDENTITIES:
            return functools.partial(_guarded, self, name)
        return super().__getattribute__(name)

    def strip(self, chars=None):
        if chars is None:
            return Traced(str.__getattribute__(self, "__dict__")["stripped"])
        return _guarded(self, "strip", chars)

    def __contains__(self, item) -> bool:
        return _operator(self, "in", item, str.__contains__)

    def __eq__(self, other) -> bool:
        return _operator(self, "==", other, str.__eq__)

    def __ne__(self, other) -> bool:
        return _operator(self, "!=", other, str.__ne__)

    __hash__ = Traced.__hash__  # a read, as for any traced string


def slot_of(content: Content) -> int:
    return str.__getattribute__(content, "__dict__")["slot"]


def plain(value) -> bool:
    """A literal operand a guard may hold: a str that is not traced, or a tuple of them."""
    if isinstance(value, tuple):
        return all(plain(v) for v in value)
    return isinstance(value, str) and not isinstance(value, Traced)


def _guarded(content: Content, name: str, *args, **kwargs):
    """``content.name(*args)``: a guard when its answer is a bool, or the content unchanged (then the
    content itself is returned); else a read (a string result is traced)."""
    answer = getattr(str, name)(content, *args, **kwargs)
    if kwargs or not all(map(plain, args)) or not (isinstance(answer, bool) or answer == str.__str__(content)):
        record_read(name)
        return Traced(answer) if isinstance(answer, str) else answer
    if isinstance(answer, bool):
        record_guard(Guard(slot_of(content), name, args, answer))
        return answer
    record_guard(Guard(slot_of(content), name, args, SAME))
    return content


def _operator(content: Content, op: str, other, base) -> bool:
    answer = base(content, other)
    if answer is NotImplemented or not plain(other):
        record_read(op)
        return answer
    record_guard(Guard(slot_of(content), op, (other,), answer))
    return answer
