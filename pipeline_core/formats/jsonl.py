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
from dataclasses import dataclass, field

import orjson

from pipeline_core.errors import ConfigError, RowError
from pipeline_core.storage.fs import url_to_fs

BLOCK_SIZE = 1 << 20  # one block and its lines are held at once
BATCH_BYTES = 4 << 20  # default byte bound of a batch (see JsonlReader)
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
) -> Iterator[tuple[int, bytes | OversizedLine]]:
    """(line number, bytes without the newline) for every line of a binary file object; a line over
    ``max_bytes`` comes as an OversizedLine, read through without being kept."""
    pending = _Pending(max_bytes)
    number = 0
    while block := f.read(block_size):
        if hasher is not None:
            hasher.update(block)
        parts = block.split(b"\n")
        if len(parts) > 1:
            number += 1
            yield number, pending.take(parts[0])  # ends the line begun in earlier blocks
            for part in parts[1:-1]:
                number += 1
                yield (
                    number,
                    part if max_bytes is None or len(part) <= max_bytes else OversizedLine(len(part), max_bytes),
                )
        pending.add(parts[-1])
    if pending.size:
        yield number + 1, pending.take(b"")


def parse_line(raw: bytes | OversizedLine):
    """A dict, or a RowError saying why the line is not one."""
    if isinstance(raw, OversizedLine):
        return too_large_error(raw)
    try:
        value = orjson.loads(raw)  # a trailing \r is JSON whitespace: CRLF lines parse as they are
    except orjson.JSONDecodeError:
        value = _parse_refused(raw)
    if isinstance(value, (dict, RowError)):
        return value
    return RowError("not_an_object", f"line holds a JSON {type(value).__name__}, expected an object")


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
        batch_size: int = 1024,
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
        batch, held = LineBatch(), 0
        with fs.open(path, "rb") as f:
            for number, raw in iter_raw_lines(f, hasher=self._hasher, max_bytes=self.max_row_bytes):
                self.bytes_read += _size(raw) + 1
                kept = 0 if isinstance(raw, OversizedLine) else len(raw)  # bytes the line holds in memory
                if held and self.batch_bytes is not None and held + kept > self.batch_bytes:
                    yield batch
                    batch, held = LineBatch(), 0
                batch.add(number, parse_line(raw))
                held += kept
                if len(batch) >= self.batch_size:
                    yield batch
                    batch, held = LineBatch(), 0
        if len(batch):
            yield batch

    @property
    def sha256(self) -> str:
        if self._hasher is None:
            raise RuntimeError(f"{self.url} was read with hashes=False: its sha256 was not taken")
        return self._hasher.hexdigest()


def check_batch_bounds(batch_size: int, batch_bytes: int | None) -> None:
    if batch_size <= 0:
        raise ConfigError(f"batch_size must be positive, got {batch_size}; 1024 is a good default")
    if batch_bytes is not None and batch_bytes <= 0:
        raise ConfigError(f"batch_bytes must be positive or None (no byte bound), got {batch_bytes}; try {BATCH_BYTES}")


def _size(raw: bytes | OversizedLine) -> int:
    return raw.size if isinstance(raw, OversizedLine) else len(raw)


def write_jsonl_lines(f, rows) -> int:
    """Write rows as JSON lines to a binary file; returns the number written."""
    n = 0
    for row in rows:
        f.write(orjson.dumps(row))
        f.write(b"\n")
        n += 1
    return n
