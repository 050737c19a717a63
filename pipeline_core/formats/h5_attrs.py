"""Scalar HDF5 attributes written as h5py's ``attrs[name] = value`` writes them, at about half the cost.

Every output file gets ~40 attributes (counts, settings, provenance). h5py's ``AttributeManager``
works out the value's dtype, builds two HDF5 types and a dataspace at every assignment: ~45 us
each here, ~2 ms of every output file, most of what a small chunk costs beyond its tokens (1,000
chunks of 4 KB: ~2 of the flow's ~10 s). ``ScalarAttrs`` makes the types once per kind of value
for the process and the dataspace once per object, asks HDF5 whether a name exists only when
creating it fails, then makes the low-level calls h5py makes (delete an attribute of that name,
create, write), so the file's bytes do not change (tests/pipeline_core/formats/test_h5_attrs.py
compares them with h5py's own). ``python -m bench.file_cost`` counts what it saves.

Only plain scalars take that path: ``str`` (variable-length UTF-8, as h5py stores it), ``bool``,
Python and numpy integers and floats. Anything else goes through h5py's own assignment. Plain
Python values are created by calling HDF5 directly when it can be reached that way
(``formats.h5_direct``, about 40% fewer instructions again), through h5py otherwise.
"""

from __future__ import annotations

import h5py
import numpy as np
from h5py import h5a, h5s, h5t

from pipeline_core.formats.h5_direct import direct_attrs

_STR = h5py.string_dtype()  # what h5py stores a str attribute as: variable-length UTF-8
_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)
_TYPES: dict[str, tuple] = {}  # kind of value -> (file type, memory type); shared by every file


class ScalarAttrs:
    """``attrs[name] = value`` on one HDF5 object (a file, a group, a dataset)."""

    def __init__(self, obj: h5py.HLObject) -> None:
        self._obj = obj
        self._space = h5s.create(h5s.SCALAR)
        self._written: set[bytes] = set()  # names set through this writer: replaced, not created
        self._direct = direct_attrs()

    def __setitem__(self, name: str, value) -> None:
        key = name.encode("utf-8")
        if self._direct is not None and key not in self._written and self._direct.create(self._obj.id, key, value):
            self._written.add(key)
            return
        scalar = _scalar(value)
        if scalar is None:
            self._obj.attrs[name] = value
            return
        data, kind = scalar
        if key in self._written:
            h5a.delete(self._obj.id, key)
        try:
            attr = self._create(key, kind, data.dtype)
        except OSError:  # HDF5: the name exists, set by other code; replace it, as h5py does
            if not h5a.exists(self._obj.id, key):
                raise
            h5a.delete(self._obj.id, key)
            attr = self._create(key, kind, data.dtype)
        try:
            attr.write(data, mtype=_TYPES[kind][1])
        except Exception:
            attr.close()
            h5a.delete(self._obj.id, key)
            raise
        attr.close()
        self._written.add(key)

    def _create(self, key: bytes, kind: str, dtype: np.dtype):
        if kind not in _TYPES:
            _TYPES[kind] = (h5t.py_create(dtype, logical=True), h5t.py_create(dtype))
        return h5a.create(self._obj.id, key, _TYPES[kind][0], self._space)


def _scalar(value) -> tuple[np.ndarray, str] | None:
    """(``value`` as the 0-d array h5py would make of it, its kind), or None when it is not a
    plain scalar. The kind tells a str (object dtype with h5py's tag) from other object dtypes."""
    if isinstance(value, str):
        return np.array(value, dtype=_STR), "str"
    if isinstance(value, _SCALARS):
        data = np.asarray(value)
        return (data, data.dtype.str) if data.dtype.kind in "biuf" else None  # an int past 64 bits: object
    return None
