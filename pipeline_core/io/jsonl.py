"""Reading JSONL in batches, with line numbers, a content hash and per-line error reasons.

The file is read in large binary blocks and split on ``\\n``; each line is parsed with orjson.
A line that is not valid UTF-8 or not valid JSON costs that line only: it comes back as a
RowError with its line number, and the rest of the file is read as usual.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field

import orjson

from pipeline_core.errors import RowError
from pipeline_core.io.fs import url_to_fs

BLOCK_SIZE = 8 << 20
BOM = b"\xef\xbb\xbf"


@dataclass(slots=True)
class LineBatch:
    """Parsed rows with their 1-based line numbers, and the lines that failed to parse."""

    rows: list[dict] = field(default_factory=list)
    lines: list[int] = field(default_factory=list)
    errors: list[tuple[int, RowError]] = field(default_factory=list)

    def __len__(self) -> int:
        return len(self.rows) + len(self.errors)


def iter_raw_lines(f, block_size: int = BLOCK_SIZE, hasher=None) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the newline) for every line of a binary file object."""
    pending = b""
    number = 0
    while block := f.read(block_size):
        if hasher is not None:
            hasher.update(block)
        parts = (pending + block).split(b"\n")
        pending = parts.pop()
        for part in parts:
            number += 1
            yield number, part
    if pending:
        yield number + 1, pending


def parse_line(raw: bytes, first: bool = False):
    """A dict, or a RowError saying why the line is not one."""
    if first and raw.startswith(BOM):
        raw = raw[len(BOM) :]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return RowError("blank_line", "blank line; JSONL wants one JSON object per line")
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError as e:
        return _decode_error(raw, e)
    if not isinstance(value, dict):
        return RowError("not_an_object", f"line holds a JSON {type(value).__name__}, expected an object")
    return value


def _decode_error(raw: bytes, error: Exception) -> RowError:
    try:
        raw.decode("utf-8")
    except UnicodeDecodeError as e:
        return RowError("invalid_utf8", f"line is not valid UTF-8 (byte {e.start}); fix the encoding")
    return RowError("invalid_json", f"line is not valid JSON: {error}")


class JsonlReader:
    """Iterate a JSONL file in LineBatches; ``sha256`` is the file's content hash once read through."""

    def __init__(self, url: str, batch_size: int = 1024, storage_options: dict | None = None) -> None:
        self.url = url
        self.batch_size = batch_size
        self.storage_options = storage_options
        self._hasher = hashlib.sha256()
        self.bytes_read = 0

    def __iter__(self) -> Iterator[LineBatch]:
        fs, path = url_to_fs(self.url, self.storage_options)
        batch = LineBatch()
        with fs.open(path, "rb") as f:
            for number, raw in iter_raw_lines(f, hasher=self._hasher):
                self.bytes_read += len(raw) + 1
                parsed = parse_line(raw, first=number == 1)
                if isinstance(parsed, RowError):
                    batch.errors.append((number, parsed))
                else:
                    batch.rows.append(parsed)
                    batch.lines.append(number)
                if len(batch) >= self.batch_size:
                    yield batch
                    batch = LineBatch()
        if len(batch):
            yield batch

    @property
    def sha256(self) -> str:
        return self._hasher.hexdigest()


def write_jsonl_lines(f, rows) -> int:
    """Write rows as JSON lines to a binary file; returns the number written."""
    n = 0
    for row in rows:
        f.write(orjson.dumps(row))
        f.write(b"\n")
        n += 1
    return n
