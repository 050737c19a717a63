"""Lines of a binary file, a block at a time: numbered, hashed as read, and bounded in size.

The file is read in blocks of ``BLOCK_SIZE`` and split on ``\\n`` only. A line longer than
``max_bytes`` is never held whole: only its size is kept (``OversizedLine``), its bytes are still
hashed. Lines come as bytes, or as views into the block read when the block's lines are long
(``split_lines``); either way they hold exactly the bytes between two newlines.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

BLOCK_SIZE = 1 << 20  # one block and its lines are held at once
LONG_LINES = 512  # mean bytes per line from which a block's lines are views into it, not copies


@dataclass(frozen=True, slots=True)
class OversizedLine:
    """Stands for a line longer than the limit: only its size was kept."""

    size: int
    limit: int


class _Pending:
    """The unfinished line across blocks, kept only up to ``limit`` bytes (then just counted)."""

    def __init__(self, limit: int | None) -> None:
        self.limit = limit
        self.parts: list[bytes] = []
        self.size = 0

    def add(self, piece: bytes) -> None:
        self.size += len(piece)
        if self.limit is not None and self.size > self.limit:
            self.parts = []
        elif piece:
            self.parts.append(piece)

    def take(self, piece: bytes) -> bytes | OversizedLine:
        """The line ending with ``piece``; resets for the next one."""
        self.add(piece)
        line = OversizedLine(self.size, self.limit) if self._over else b"".join(self.parts)
        self.parts, self.size = [], 0
        return line

    @property
    def _over(self) -> bool:
        return self.limit is not None and self.size > self.limit


def iter_raw_lines(
    f, block_size: int = BLOCK_SIZE, hasher=None, max_bytes: int | None = None
) -> Iterator[tuple[int, bytes | memoryview | OversizedLine]]:
    """(line number, its bytes without the newline) for every line of a binary file object: bytes, or
    a view into the block read (``split_lines``); a line over ``max_bytes`` comes as an
    OversizedLine, read through without being kept."""
    for first, lines in iter_line_blocks(f, block_size, hasher, max_bytes):
        yield from enumerate(lines, start=first)


def iter_line_blocks(
    f, block_size: int = BLOCK_SIZE, hasher=None, max_bytes: int | None = None
) -> Iterator[tuple[int, list[bytes | memoryview | OversizedLine]]]:
    """(number of the first line, the lines) for each block read that ends at least one line: the
    lines as ``iter_raw_lines`` gives them, a list at a time so callers can work on whole blocks."""
    pending = _Pending(max_bytes)
    number = 1
    while block := f.read(block_size):
        if hasher is not None:
            hasher.update(block)
        parts = split_lines(block)
        if len(parts) > 1:
            rest = parts.pop()  # the line still open at the block's end
            lines = [pending.take(parts[0])]  # ends the line begun in earlier blocks
            middle = parts[1:]
            if max_bytes is not None and middle and max(map(len, middle)) > max_bytes:
                middle = [_bounded(part, max_bytes) for part in middle]
            lines += middle
            pending.add(rest)
            yield number, lines
            number += len(lines)
        else:
            pending.add(parts[0])
    if pending.size:
        yield number, [pending.take(b"")]


def split_lines(block: bytes) -> list[bytes | memoryview]:
    """``block.split(b"\\n")``, as views into ``block`` when its lines are long (``LONG_LINES``): a
    copy of every line costs more than a Python step per line then (0.44 against 0.69 ms per MB of
    3 KB lines, parsed with orjson), while for short lines the step costs more than the copy."""
    newlines = block.count(b"\n")
    if newlines == 0 or len(block) < LONG_LINES * newlines:
        return block.split(b"\n")
    view, lines, start, find = memoryview(block), [], 0, block.find
    while (end := find(b"\n", start)) >= 0:
        lines.append(view[start:end])
        start = end + 1
    lines.append(view[start:])
    return lines


def _bounded(line: bytes, max_bytes: int) -> bytes | OversizedLine:
    return line if len(line) <= max_bytes else OversizedLine(len(line), max_bytes)
