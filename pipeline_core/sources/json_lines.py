"""Where a JSON source breaks, for a load that failed: ``datasets`` (pyarrow) reports a JSON parse
error as "An error occurred while generating the dataset", its cause giving a row within one
block of the file, not the line. ``first_bad_line`` reads the files again and names the first
line that a strict parser (orjson) refuses, with its reason: a lone surrogate (``"\\ud800"``), a
trailing comma, a truncated last line. A file that is one JSON document (an array) is parsed
whole and the error placed by its line. Only called after a load failed, so it costs nothing
on good data. A streaming load fails later, while it is read: ``DiagnosedStream`` wraps it so the
same message comes from its iteration.
"""

from __future__ import annotations

import json
from collections.abc import Iterator, Sequence

import fsspec
import orjson

from pipeline_core.errors import SourceError, error_chain


def unreadable(where: str) -> SourceError:
    return SourceError(f"cannot read {where}; fix or remove that line and export again")


class DiagnosedStream:
    """A streaming dataset of JSON ``files`` whose parse errors name the file and line."""

    def __init__(self, data, files: Sequence[str], storage_options: dict | None) -> None:
        self._data, self._files, self._storage_options = data, list(files), storage_options

    def __iter__(self) -> Iterator[dict]:
        try:
            yield from self._data
        except Exception as e:
            where = diagnosed(e, self._files, self._storage_options)
            if where is None:
                raise
            raise unreadable(where) from e

    def __getattr__(self, name: str):
        if name.startswith("__") or name == "_data":  # not yet set while unpickling
            raise AttributeError(name)
        return getattr(self._data, name)


def diagnosed(error: Exception, files: Sequence[str], storage_options: dict | None) -> str | None:
    """``first_bad_line`` for a failed read that may be bad JSON; None for an I/O error (retried as
    it is, never re-read here) or when the diagnosis itself fails (the original error stands)."""
    if any(isinstance(e, OSError) for e in error_chain(error)):
        return None
    try:
        return first_bad_line(files, storage_options)
    except Exception:  # noqa: BLE001 - the read's own error is the one to report
        return None


def first_bad_line(files: Sequence[str], storage_options: dict | None = None) -> str | None:
    """``"{file}, line {n}: {reason}"`` for the first line no JSON parser accepts, else None."""
    for url in files:
        with fsspec.open(url, "rb", compression="infer", **(storage_options or {})) as f:
            found = _bad_line(f)
        if found is not None:
            return f"{url}, line {found[0]}: {found[1]}"
    return None


def _bad_line(f) -> tuple[int, str] | None:
    first = f.read(1 << 16)
    if first.lstrip().startswith(b"["):  # one JSON document: where does it break?
        return _document_error(first + f.read())
    f.seek(0)
    for number, line in enumerate(f, start=1):
        if line.strip() and (found := _refused(line)) is not None:
            return number + found[0] - 1, found[1]
    return None


def _document_error(body: bytes) -> tuple[int, str] | None:
    return _refused(body)


def _refused(text: bytes) -> tuple[int, str] | None:
    """(line within ``text``, reason) when pyarrow cannot read it either, else None. orjson is
    stricter than pyarrow in one way: it refuses NaN and Infinity, which pyarrow (and Python's
    json) read; those alone are no reason. A lone surrogate it refuses is (pyarrow does too)."""
    try:
        orjson.loads(text)
        return None
    except orjson.JSONDecodeError as e:
        strict = (e.lineno, f"{e.msg} (column {e.colno})")
        if "surrogate" in e.msg:
            return strict
    try:
        json.loads(text)
    except ValueError as e:
        return (e.lineno, f"{e.msg} (column {e.colno})") if isinstance(e, json.JSONDecodeError) else strict
    return None
