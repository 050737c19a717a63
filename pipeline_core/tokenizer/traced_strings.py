"""The traced strings a traced render (template_trace.py) hands a template as message contents.

``Traced``: a string whose every use but output, concatenation and truth is recorded as a read.
``Content``: a message content itself, or one derived from it (one sentinel of chat/frames.py, for
slot ``slot``), whose questions a row can answer again are recorded as guards instead and whose
string methods make derived contents (template_reads.py).
"""

from __future__ import annotations

import functools
from collections.abc import Callable

from pipeline_core.tokenizer.template_reads import ANSWERS, IDENTITIES, Derivation, Guard, record_guard, record_read


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
    """A traced content standing for slot ``slot`` of every row: a message content, or one derived
    from another (``derive(derivation)`` makes the Content of a derivation, chat/frames.py).

    A question asked of the content itself whose answer can be asked again of a row is a *guard*
    (tokenizer/template_reads.py), not a read: a bool method or operator with literal operands
    (``startswith``, ``in``, ``==``...). A string method of IDENTITIES with literal arguments
    (``lstrip('\\n')``, ``|trim``, ``replace('a', 'b')``) is a *derivation*: it returns the Content of
    a new slot, which a row fills with the method's real result, so what the template asks of the
    result is guarded too. Anything else is a read.

    Every Content stands for a text holding a non-whitespace character on every row it admits, as
    each sentinel does (so truth tests agree): a message content is one (the shape fixes which are
    empty or blank), whitespace stripping keeps one, and any other derivation records the guard
    that its result is not blank."""

    def __new__(cls, text: str, slot: int, derive: Derive) -> Content:
        made = super().__new__(cls, text)
        made.__dict__.update(slot=slot, derive=derive)
        return made

    def __getattribute__(self, name: str):
        if name in ANSWERS:
            return functools.partial(_guarded, self, name)
        if name in IDENTITIES:
            return functools.partial(_derived, self, name)
        return super().__getattribute__(name)

    def __contains__(self, item) -> bool:
        return _operator(self, "in", item, str.__contains__)

    def __eq__(self, other) -> bool:
        return _operator(self, "==", other, str.__eq__)

    def __ne__(self, other) -> bool:
        return _operator(self, "!=", other, str.__ne__)

    __hash__ = Traced.__hash__  # a read, as for any traced string


Derive = Callable[[Derivation], Content]  # the Content standing for a derivation's result


def slot_of(content: Content) -> int:
    return str.__getattribute__(content, "__dict__")["slot"]


def plain(value) -> bool:
    """A literal operand a guard may hold: a str that is not traced, or a tuple of them."""
    if isinstance(value, tuple):
        return all(plain(v) for v in value)
    return isinstance(value, str) and not isinstance(value, Traced)


def _literal(value) -> bool:
    """An argument a derivation may hold: a plain str, an int (``replace``'s count) or None."""
    return value is None or type(value) is int or plain(value)


def _guarded(content: Content, name: str, *args, **kwargs):
    """``content.name(*args)`` of a bool method: a guard when its operands are literals, else a read."""
    answer = getattr(str, name)(content, *args, **kwargs)
    if kwargs or not all(map(plain, args)):
        record_read(name)
        return answer
    record_guard(Guard(slot_of(content), name, args, answer))
    return answer


def _derived(content: Content, name: str, *args, **kwargs):
    """``content.name(*args)`` of a string method: the Content of a derivation when its arguments are
    literals (and valid: the call on the sentinel raises as Jinja's would), else a read."""
    answer = getattr(str, name)(content, *args, **kwargs)
    if kwargs or not all(map(_literal, args)):
        record_read(name)
        return Traced(answer)
    if args == (None,):  # strip(None), as |trim calls it: strip()
        args = ()
    derivation = Derivation(slot_of(content), name, args)
    made = str.__getattribute__(content, "__dict__")["derive"](derivation)
    if not derivation.keeps_filled():
        record_guard(Guard(slot_of(made), "blank", (), False))
    return made


def _operator(content: Content, op: str, other, base) -> bool:
    answer = base(content, other)
    if answer is NotImplemented or not plain(other):
        record_read(op)
        return answer
    record_guard(Guard(slot_of(content), op, (other,), answer))
    return answer
