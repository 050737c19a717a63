"""What a traced render records of its contents: plain *reads*, and *guards*.

A read is a use of a traced content whose outcome the render cannot tell again for another text
(``len``, ``split``, indexing...): the render holds only for the text it was given. A guard is a
question asked of a message content itself (a ``Content``, not a string made from it) whose answer
is cheap to ask again of any row's content::

    Guard(slot, "startswith", ("<tool_response>",), False)    row.startswith("<tool_response>") is False
    Guard(slot, "in", ("</think>",), False)                   ("</think>" in row) is False
    Guard(slot, "lstrip", ("\\n",), SAME)                      row.lstrip("\\n") == row

A render is valid for a row whose contents answer every guard as the traced contents did: its
control flow, and every string it wrote, is then the same with the row's contents in their places.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass

SAME = "same"  # the expected answer of a string read that returned the content unchanged
ANSWERS = frozenset(  # str methods returning a bool: guarded by their answer
    ("startswith", "endswith", "isalnum", "isalpha", "isascii", "isdecimal", "isdigit", "isidentifier",
     "islower", "isnumeric", "isprintable", "isspace", "istitle", "isupper")
)  # fmt: skip
IDENTITIES = frozenset(("lstrip", "rstrip", "strip", "removeprefix", "removesuffix", "replace"))
_OPERATORS = {  # the guarded operators, as a function of (row content, the other operand)
    "in": lambda row, item: item in row,
    "in literal": lambda row, literal: row in literal,
    "==": lambda row, other: row == other,
    "!=": lambda row, other: row != other,
}

_trace = threading.local()  # .reads, .guards: the current traced render's records


@dataclass(frozen=True, slots=True)
class Guard:
    """``op(content[slot], *args)`` must give ``expected`` (SAME: the content itself)."""

    slot: int
    op: str
    args: tuple
    expected: object

    def holds(self, contents: list[str]) -> bool:
        row = contents[self.slot]
        if self.op in _OPERATORS:
            return _OPERATORS[self.op](row, *self.args) == self.expected
        answer = getattr(str, self.op)(row, *self.args)
        return answer == row if self.expected == SAME else answer == self.expected


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
