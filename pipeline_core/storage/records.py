"""Small JSON records kept between processes, so work done once per machine is not redone.

Where: ``$H5PIPE_CACHE_DIR``, else ``$XDG_CACHE_HOME/h5pipe``, else ``~/.cache/h5pipe``, one
folder per kind of record, one file per key. ``H5PIPE_CACHE_DIR=none`` turns every record off.

A record only ever saves time: reading one that is missing, torn or foreign gives ``MISSING``
(the caller recomputes and writes it again), and a folder that cannot be written only costs the
next process the same work. Writes go to a temporary name first, then are renamed into place, so
a reader never sees half a record.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

import orjson

MISSING = object()


def cache_dir() -> Path | None:
    """Where records live, or None when ``H5PIPE_CACHE_DIR=none`` turns them off."""
    chosen = os.environ.get("H5PIPE_CACHE_DIR")
    if chosen is not None:
        return None if chosen.strip().lower() in ("", "none", "off") else Path(chosen)
    return default_cache_dir()


def default_cache_dir() -> Path:
    """``$XDG_CACHE_HOME/h5pipe``, else ``~/.cache/h5pipe``."""
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "h5pipe"


def read_record(kind: str, key: str):
    """The record's JSON object, or ``MISSING``."""
    path = _path(kind, key)
    if path is None or not path.is_file():
        return MISSING
    try:
        record = orjson.loads(path.read_bytes())
    except (OSError, orjson.JSONDecodeError):
        return MISSING
    return record if isinstance(record, dict) else MISSING


def write_record(kind: str, key: str, record: dict) -> None:
    """Best effort and atomic (see the module docstring)."""
    path = _path(kind, key)
    if path is None:
        return
    tmp = None
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{key[:16]}.", suffix=".tmp")
        with os.fdopen(fd, "wb") as f:
            f.write(orjson.dumps(record))
        os.replace(tmp, path)
    except OSError:
        if tmp is not None and os.path.exists(tmp):
            os.unlink(tmp)


def _path(kind: str, key: str) -> Path | None:
    root = cache_dir()
    return None if root is None else root / kind / f"{key}.json"
