"""Reading JSONL in batches, with line numbers, a content hash and per-line error reasons.

The file is read in large binary blocks and split on ``\\n`` only (U+2028/U+2029 inside strings are
valid JSON and stay in the text); each line is parsed with orjson. A bad line costs that line only:
it comes back as a RowError with its 1-based line number, and the rest of the file is read as usual.

Reasons: ``invalid_utf8`` (one bad byte spoils its line, not the file), ``invalid_json``,
``non_finite_number`` (NaN, Infinity or a number beyond a double: not JSON), ``lone_surrogate``,
``blank_line``, ``not_an_object`` and ``row_too_large``. Decisions:

- a byte order mark at the start of a line is ignored (RFC 8259 lets a parser ignore it; files
  joined with ``cat`` carry one per part);
- a lone UTF-16 surrogate escape (``"\\ud800"`` without its pair) encodes no character: the row is
  quarantined as ``lone_surrogate`` rather than repaired with U+FFFD, so no training text is ever
  altered silently (fix the producer, which split a surrogate pair);
- a line longer than ``max_bytes`` is ``row_too_large``: its bytes are counted and hashed but never
  held in memory beyond ``max_bytes`` nor parsed.
"""

from __future__ import annotations

import hashlib
import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

import orjson

from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.lines import OversizedLine, iter_line_blocks
from pipeline_core.formats.write_behind import WriteBehind
from pipeline_core.storage.fs import url_to_fs

BATCH_BYTES = 16 << 20  # default byte bound of a batch (see JsonlReader; why this size: stages/encode_ahead.py)
BATCH_ROWS = 16384  # default row bound of a batch
HASH_BLOCKS_AHEAD = 4  # read blocks waiting for the hashing thread
BOM = b"\xef\xbb\xbf"
SURROGATE = re.compile("[\ud800-\udfff]")


@dataclass(slots=True)
class LineBatch:
    """Parsed rows with their 1-based line numbers, and the lines that failed to parse."""

    rows: list[dict] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[tuple[int, RowError]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows) + len(self.errors)

    def add(self, number: int, parsed) -> None:
        """Record line ``number``: a parsed row, or the RowError it became."""
        if isinstance(parsed, RowError):
            self.errors.append((number, parsed))
        else:
            self.rows.append(parsed)
            self.lines.append(number)

    def extend(self, first: int, parsed: list) -> None:
        """Record lines ``first``, ``first + 1``, ...: ``add`` for each, at once when all are rows."""
        if all(type(p) is dict for p in parsed):
            self.rows += parsed
            self.lines += range(first, first + len(parsed))
            return
        for number, one in enumerate(parsed, start=first):
            self.add(number, one)


def parse_line(raw: bytes | memoryview | OversizedLine):
    """A dict, or a RowError saying why the line is not one."""
    if isinstance(raw, OversizedLine):
        return too_large_error(raw)
    try:
        value = orjson.loads(raw)  # a trailing \r is JSON whitespace: CRLF lines parse as they are
    except orjson.JSONDecodeError:
        value = _parse_refused(bytes(raw))  # a view into the block (split_lines) has no bytes methods
    if isinstance(value, (dict, RowError)):
        return value
    return RowError("not_an_object", f"line holds a JSON {type(value).__name__}, expected an object")


def parse_lines(lines: list[bytes | memoryview | OversizedLine]) -> list:
    """``parse_line`` of every line, a block at a time: one orjson call per line and no other
    Python work per line unless some line of the block is not a JSON object as it stands."""
    try:
        values = list(map(orjson.loads, lines))  # an OversizedLine is a TypeError
    except (orjson.JSONDecodeError, TypeError):
        return [parse_line(raw) for raw in lines]
    if all(type(v) is dict for v in values):
        return values
    return [v if type(v) is dict else parse_line(raw) for v, raw in zip(values, lines)]


def _parse_refused(raw: bytes):
    """The slow path, for the few lines orjson refuses as they are: a byte order mark, a blank
    line, or a real error (whose message is then taken on the line without its ``\\r``)."""
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return RowError("blank_line", "blank line; JSONL wants one JSON object per line")
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return _decode_error(raw, e)


def too_large_error(line: OversizedLine) -> RowError:
    return RowError(
        "row_too_large",
        f"line has {line.size} bytes > max_row_bytes {line.limit}; it was skipped unparsed "
        "(raise max_row_bytes if rows this large are real)",
    )


def _decode_error(raw: bytes, error: Exception) -> RowError:
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return RowError("invalid_utf8", f"line is not valid UTF-8 (byte {e.start}); fix the encoding")
    try:
        return _classify(text, error)
    except RecursionError:  # nested too deep for the stdlib parser too
        return RowError("invalid_json", f"line is not valid JSON: {error}")


class _NonFinite(ValueError):
    pass


def _refuse_constant(name: str):
    raise _NonFinite(name)


def _classify(text: str, error: Exception) -> RowError:
    """Why orjson refused valid UTF-8: the stdlib parser (laxer) tells the special cases apart."""
    try:
        value = json.loads(text, parse_constant=_refuse_constant)
    except _NonFinite as e:
        return _non_finite(str(e))
    except ValueError:
        return RowError("invalid_json", f"line is not valid JSON: {error}")
    if _any_string(value, _has_surrogate):
        return RowError(
            "lone_surrogate",
            "line holds a lone UTF-16 surrogate escape (like \\ud800 without its pair), which encodes no "
            "character; fix the producer of this file (it split a surrogate pair)",
        )
    if _any_number(value, lambda x: isinstance(x, float) and math.isinf(x)):
        return _non_finite("a number beyond the range of a double")
    return RowError("invalid_json", f"line is not valid JSON: {error}")


def _non_finite(what: str) -> RowError:
    return RowError("non_finite_number", f"line holds {what}, which JSON cannot express; write null or a string")


def _has_surrogate(text: str) -> bool:
    return SURROGATE.search(text) is not None


def _children(value) -> list:
    if isinstance(value, dict):
        return [*value.keys(), *value.values()]
    return list(value) if isinstance(value, list) else []


def _any_string(value, test) -> bool:
    return test(value) if isinstance(value, str) else any(_any_string(v, test) for v in _children(value))


def _any_number(value, test) -> bool:
    return test(value) if isinstance(value, float) else any(_any_number(v, test) for v in _children(value))


class JsonlReader:
    """Iterate a JSONL file in LineBatches; ``sha256`` is the file's content hash once read through
    (``hashes=False``: not taken, for a caller that hashed the file already and checks its stamp).

    ``max_row_bytes``: longer lines become ``row_too_large`` errors without being parsed (None: no limit).

    A batch ends after ``batch_size`` lines, or before the line that would take it past
    ``batch_bytes`` bytes of JSON (None: no byte bound), whichever comes first; a line longer than
    ``batch_bytes`` is a batch of its own. Everything a batch becomes downstream (texts, token ids,
    packs) grows with its bytes, so the byte bound caps the working memory per batch whatever the
    file holds: a chunk with a few huge rows needs no more memory than one of short rows.
    """

    def __init__(
        self,
        url: str,
        batch_size: int = BATCH_ROWS,
        storage_options: dict | None = None,
        max_row_bytes: int | None = None,
        batch_bytes: int | None = BATCH_BYTES,
        hashes: bool = True,
    ) -> None:
        check_batch_bounds(batch_size, batch_bytes)
        self.url = url
        self.batch_size = batch_size
        self.storage_options = storage_options
        self.max_row_bytes = max_row_bytes
        self.batch_bytes = batch_bytes
        self._hasher = hashlib.sha256() if hashes else None
        self.bytes_read = 0

    def __iter__(self) -> Iterator[LineBatch]:
        fs, path = url_to_fs(self.url, self.storage_options)
        batch, cut = LineBatch(), _BatchCut(self.batch_size, self.batch_bytes)
        with fs.open(path, "rb") as f, _hash_behind(self._hasher) as hasher:
            for first, lines in iter_line_blocks(f, hasher=hasher, max_bytes=self.max_row_bytes):
                kept, read = _line_sizes(lines)
                self.bytes_read += read
                parsed = parse_lines(lines)
                start = 0
                for end in cut.ends(kept):
                    batch.extend(first + start, parsed[start:end])
                    yield batch
                    batch, start = LineBatch(), end
                batch.extend(first + start, parsed[start:])
        if len(batch):
            yield batch

    @property
    def sha256(self) -> str:
        if self._hasher is None:
            raise RuntimeError(f"{self.url} was read with hashes=False: its sha256 was not taken")
        return self._hasher.hexdigest()


class _HashBehind:
    """A hasher's ``update`` run in a thread of its own, in order: the sha256 of a file (~1.2 GB/s
    here) no longer holds up the thread that splits and parses its lines. The first block is
    hashed in the caller's thread and the thread starts with the second: a file of one block (many
    small chunks) would pay a thread's start and its hand-offs for microseconds of hashing."""

    def __init__(self, hasher) -> None:
        self._hasher, self._first, self._updates = hasher, True, None

    def update(self, block: bytes) -> None:
        if self._first:
            self._hasher.update(block)  # done before any later block is handed to the thread
            self._first = False
            return
        if self._updates is None:
            self._updates = WriteBehind(HASH_BLOCKS_AHEAD, name="h5pipe-hash")
        self._updates.submit(self._hasher.update, block)

    def wait(self) -> None:
        if self._updates is not None:
            self._updates.wait()

    def shutdown(self) -> None:
        if self._updates is not None:
            self._updates.shutdown()


@contextmanager
def _hash_behind(hasher) -> Iterator[_HashBehind | None]:
    """``hasher`` fed by a thread while the block is open; every update is done when it closes."""
    if hasher is None:
        yield None
        return
    behind = _HashBehind(hasher)
    try:
        yield behind
        behind.wait()
    finally:
        behind.shutdown()


def check_batch_bounds(batch_size: int, batch_bytes: int | None) -> None:
    if batch_size <= 0:
        raise ConfigError(f"batch_size must be positive, got {batch_size}; {BATCH_ROWS} is a good default")
    if batch_bytes is not None and batch_bytes <= 0:
        raise ConfigError(f"batch_bytes must be positive or None (no byte bound), got {batch_bytes}; try {BATCH_BYTES}")


def _size(raw: bytes | OversizedLine) -> int:
    return raw.size if isinstance(raw, OversizedLine) else len(raw)


def _line_sizes(lines: list[bytes | OversizedLine]) -> tuple[list[int], int]:
    """(bytes each line holds in memory: 0 for an OversizedLine, bytes read with the newlines)."""
    try:
        kept = list(map(len, lines))
        return kept, sum(kept) + len(lines)
    except TypeError:  # an OversizedLine among them
        kept = [0 if isinstance(raw, OversizedLine) else len(raw) for raw in lines]
        return kept, sum(map(_size, lines)) + len(lines)


class _BatchCut:
    """Where batches end, a block of line sizes at a time (see JsonlReader for the rule)."""

    def __init__(self, batch_size: int, batch_bytes: int | None) -> None:
        self.batch_size, self.batch_bytes = batch_size, batch_bytes
        self.count = self.held = 0  # lines and bytes in the open batch

    def ends(self, kept: list[int]) -> list[int]:
        """Positions in this block before which a batch ends (0: the open batch ends before it)."""
        total = sum(kept)
        if self.count + len(kept) < self.batch_size and (
            self.batch_bytes is None or self.held + total <= self.batch_bytes
        ):  # the whole block fits the open batch
            self.count, self.held = self.count + len(kept), self.held + total
            return []
        ends, count, held = [], self.count, self.held
        size, limit = self.batch_size, self.batch_bytes
        for i, k in enumerate(kept):
            if held and limit is not None and held + k > limit:
                ends.append(i)
                count = held = 0
            count += 1
            held += k
            if count >= size:
                ends.append(i + 1)
                count = held = 0
        self.count, self.held = count, held
        return ends


def write_jsonl_lines(f, rows) -> int:
    """Write rows as JSON lines to a binary file; returns the number written."""
    n = 0
    for row in rows:
        f.write(orjson.dumps(row))
        f.write(b"\n")
        n += 1
    return n
