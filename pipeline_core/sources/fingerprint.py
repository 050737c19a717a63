"""Fingerprints: ids of the rows a source yields, stable across runs, processes and machines.

Files are identified by their content (sha256, read in 1 MiB blocks through fsspec), not their
path, so a copy elsewhere keeps its fingerprint and an edit changes it. The options that shape the
rows (builder, split, converter, sampling) are hashed alongside by the caller with ``digest``.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Iterable, Sequence

import orjson

from pipeline_core.storage.hashing import file_digest


def digest(*parts) -> str:
    """sha256 of JSON-able parts (dict keys sorted)."""
    data = orjson.dumps(parts, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str)
    return hashlib.sha256(data).hexdigest()


def file_sha256(url: str, storage_options: dict | None = None) -> str:
    return file_digest(url, storage_options).sha256


def files_fingerprint(files: Sequence[str], storage_options: dict | None = None) -> str:
    """The files' contents in order; their names and folder do not count."""
    return digest("files", [file_sha256(f, storage_options) for f in files])


def tree_fingerprint(root: str) -> str:
    """Every file of a local folder with its path relative to the folder (a repository's config names
    them). Symlinked folders are followed, as ``datasets`` reads through them (each real folder once)."""
    entries, seen = [], {os.path.realpath(root)}
    for folder, dirs, names in os.walk(root, followlinks=True):
        dirs[:] = [d for d in sorted(dirs) if not d.startswith(".") and _first_visit(os.path.join(folder, d), seen)]
        for name in sorted(n for n in names if not n.startswith(".")):
            path = os.path.join(folder, name)
            entries.append([os.path.relpath(path, root).replace(os.sep, "/"), file_sha256(path)])
    return digest("tree", sorted(entries))


def _first_visit(folder: str, seen: set[str]) -> bool:
    real = os.path.realpath(folder)
    if real in seen:
        return False
    seen.add(real)
    return True


def rows_fingerprint(rows: Iterable[dict]) -> str:
    """Content hash of rows, streamed (one pass, nothing kept)."""
    sha = hashlib.sha256()
    for row in rows:
        sha.update(orjson.dumps(row, option=orjson.OPT_SORT_KEYS | orjson.OPT_SERIALIZE_NUMPY, default=str))
        sha.update(b"\n")
    return sha.hexdigest()
