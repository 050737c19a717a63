"""What JSON cannot hold, found in a Python row: the path and value of the first offender.

orjson writes NaN and +/-Infinity as ``null`` without a word, and refuses a set, bytes, an integer
beyond 64 bits or a non-string key with a message that names neither the row nor the field. The
export stage uses these to report such a row by the path of the value (``messages[1].loss_weight``,
``meta.ids[2]``) instead of writing something else or stopping without saying where.
"""

from __future__ import annotations

import dataclasses
import enum
import math
from collections.abc import Iterable

import numpy as np
import orjson

OPTIONS = orjson.OPT_SERIALIZE_NUMPY


def non_finite_in(row: dict, line: bytes) -> tuple[str, float] | None:
    """``non_finite(row)``, cheaply: a flat row's values are checked one by one, and a nested row is
    walked only when its line (orjson's output, which writes NaN/Infinity as null) holds ``null``."""
    for value in row.values():
        kind = type(value)
        if kind is str or kind is int or kind is bool or value is None:
            continue
        if kind is float and math.isfinite(value):
            continue
        return non_finite(row) if kind is float or b"null" in line else None
    return None


def non_finite(value, path: str = "") -> tuple[str, float] | None:
    """The path (``messages[1].loss_weight``) and value of the first NaN/Infinity in ``value``, as
    orjson sees it (floats, numpy floats and arrays, dataclasses, enums), or None."""
    if isinstance(value, float):
        return None if math.isfinite(value) else (path, value)
    if isinstance(value, (np.floating, np.ndarray)):
        return _numpy_non_finite(value, path)
    return _first(non_finite, _children(value, path))


def unencodable(value, error: str = "", path: str = "") -> tuple[str, str]:
    """The path of the first value in ``value`` that orjson refuses, and what it is (``set``, ``int
    beyond 64 bits``, ``a key of type int``); the path is ``""`` when no single value is to blame
    (nesting deeper than orjson goes), with orjson's ``error`` in the description."""
    return _unencodable(value, path) or ("", f"a value orjson refuses ({error})")


def _unencodable(value, path: str) -> tuple[str, str] | None:
    if isinstance(value, dict):
        key = next((k for k in value if not isinstance(k, str)), None)
        if key is not None:
            return path, f"a key of type {type(key).__name__} ({key!r})"
    children = _children(value, path)
    if children is not None:
        return _first(_unencodable, children)
    try:
        orjson.dumps(value, option=OPTIONS)
    except TypeError as e:
        return path, _describe(value, e)
    return None


def _describe(value, error: TypeError) -> str:
    if isinstance(value, int):
        return f"the integer {value}, beyond 64 bits"
    return f"a value of type {type(value).__name__} ({error})"


def _children(value, path: str) -> Iterable[tuple[str, object]] | None:
    """``(path, item)`` of a container orjson walks into, or None for a leaf."""
    if isinstance(value, dict):
        return ((f"{path}.{k}" if path else str(k), v) for k, v in value.items())
    if isinstance(value, (list, tuple)):
        return ((f"{path}[{i}]", v) for i, v in enumerate(value))
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return ((f"{path}.{f.name}" if path else f.name, getattr(value, f.name)) for f in dataclasses.fields(value))
    if isinstance(value, enum.Enum):
        return iter([(path, value.value)])
    return None


def _first(check, items: Iterable[tuple[str, object]] | None):
    for path, item in items or ():
        found = check(item, path)
        if found is not None:
            return found
    return None


def _numpy_non_finite(value, path: str) -> tuple[str, float] | None:
    if value.dtype.kind != "f":
        return None
    bad = np.argwhere(~np.isfinite(value))
    if not len(bad):
        return None
    where = bad[0].tolist()
    return path + "".join(f"[{i}]" for i in where), float(value[tuple(where)])
