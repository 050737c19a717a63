"""Data file formats: file extension -> the ``datasets`` packaged builder that reads it.

``.txt`` files hold one text per line and become ``{"text": line}`` rows. ``.json`` holds a JSON
array or JSON lines; ``.json`` and ``.jsonl`` may be mixed (same builder). Anything else is an error
that names the offending files.
"""

from __future__ import annotations

import posixpath
from collections.abc import Sequence

BUILDERS = {
    ".json": "json",
    ".jsonl": "json",
    ".csv": "csv",
    ".parquet": "parquet",
    ".arrow": "arrow",
    ".txt": "text",
}
LISTED_FILES = 5  # how many file names an error message shows per group


def extension(path: str) -> str:
    return posixpath.splitext(path.rstrip("/"))[1].lower()


def is_data_file(path: str) -> bool:
    return extension(path) in BUILDERS


def builder_for(files: Sequence[str], where: str) -> str:
    """The one builder that reads all ``files``; ValueError naming the files otherwise."""
    if not files:
        raise ValueError(f"no data files in {where}; expected files ending in {', '.join(BUILDERS)}")
    unknown = [f for f in files if not is_data_file(f)]
    if unknown:
        raise ValueError(
            f"unsupported file type in {where}: {_names(unknown)}; supported extensions: {', '.join(BUILDERS)}"
        )
    groups: dict[str, list[str]] = {}
    for f in files:
        groups.setdefault(BUILDERS[extension(f)], []).append(f)
    if len(groups) > 1:
        listed = "; ".join(f"{builder}: {_names(names)}" for builder, names in sorted(groups.items()))
        raise ValueError(f"{where} mixes data formats ({listed}); put each format in its own folder")
    return next(iter(groups))


def _names(files: Sequence[str]) -> str:
    shown = ", ".join(files[:LISTED_FILES])
    more = len(files) - LISTED_FILES
    return f"{shown} (+{more} more)" if more > 0 else shown
