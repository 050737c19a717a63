"""What a traced render records of its contents: plain *reads*, *guards* and *derivations*.

A read is a use of a traced content whose outcome the render cannot tell again for another text
(``len``, ``split``, indexing...): the render holds only for the text it was given. A guard is a
question asked of a content itself (a ``Content``, not a string made from it) whose answer is
cheap to ask again of any row's content::

    Guard(slot, "startswith", ("<tool_response>",), False)    row.startswith("<tool_response>") is False
    Guard(slot, "in", ("</think>",), False)                   ("</think>" in row) is False

A derivation is a string method with literal arguments that makes a new content from one
(Qwen3's ``content.lstrip('\\n')``): the render is handed a new sentinel standing for its result,
slot ``n + i`` of a row that has ``n`` contents, which a row computes with the same method::

    Derivation(1, "lstrip", ("\\n",))                            contents[1].lstrip("\\n")

A render is valid for a row whose contents (its own, then the derived ones) answer every guard as
the traced contents did: its control flow, and every string it wrote, is then the same with the
row's contents in their places.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

ANSWERS = frozenset(  # str methods returning a bool: guarded by their answer
    ("startswith", "endswith", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
     "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper")
)  # fmt: skip
IDENTITIES = frozenset(("lstrip", "rstrip", "strip", "removeprefix", "removesuffix", "replace"))  # derivations
_OPERATORS = {  # the guarded operators, as a function of (row content, the other operand)
    "in": lambda row, item: item in row,
    "in literal": lambda row, literal: row in literal,
    "==": lambda row, other: row == other,
    "!=": lambda row, other: row != other,
    "blank": lambda row: row.isspace() or not row,  # a derived content that may be empty or blank
}

_trace = threading.local()  # .reads, .guards: the current traced render's records


@dataclass(frozen=True, slots=True)
class Guard:
    """``op(content[slot], *args)`` must give ``expected``."""

    slot: int
    op: str
    args: tuple
    expected: object

    def holds(self, contents: list[str]) -> bool:
        row = contents[self.slot]
        if self.op in _OPERATORS:
            return _OPERATORS[self.op](row, *self.args) == self.expected
        return getattr(str, self.op)(row, *self.args) == self.expected


@dataclass(frozen=True, slots=True)
class Derivation:
    """The content ``str.op(contents[parent], *args)``: what Jinja computes from the row's content."""

    parent: int
    op: str
    args: tuple

    def apply(self, contents: list[str]) -> str:
        return getattr(str, self.op)(contents[self.parent], *self.args)

    def keeps_filled(self) -> bool:
        """Whether a content holding a non-whitespace character still holds one: stripping only
        whitespace never removes it. Any other derivation may leave a row's content empty or blank."""
        return self.op in ("strip", "lstrip", "rstrip") and (not self.args or str.isspace(self.args[0] or " "))


def record_read(what: str) -> None:
    reads = getattr(_trace, "reads", None)
    if reads is not None:
        reads.append(what)


def record_guard(guard: Guard) -> None:
    guards = getattr(_trace, "guards", None)
    if guards is not None and guard not in guards:
        guards.append(guard)


class Recording:
    """``with Recording() as (reads, guards):`` collects one render's records (per thread)."""

    def __enter__(self) -> tuple[list[str], list[Guard]]:
        self.reads, self.guards = [], []
        _trace.reads, _trace.guards = self.reads, self.guards
        return self.reads, self.guards

    def __exit__(self, *exc) -> None:
        _trace.reads = _trace.guards = None
