"""Scalar HDF5 attributes written as h5py's ``attrs[name] = value`` writes them, at a third of the cost.

Every output file gets ~40 attributes (counts, settings, provenance). h5py's ``AttributeManager``
works out the value's dtype, builds two HDF5 types and a dataspace at every assignment: ~50 us
each here, ~2 ms of every output file, most of what a small chunk costs beyond its tokens (1,000
chunks of 4 KB: ~2 of the flow's ~10 s). ``ScalarAttrs`` makes the types once per kind of value
and the dataspace once, then makes the same low-level calls h5py makes in the same order (delete
an attribute of that name, create, write), so the file's bytes do not change
(tests/pipeline_core/formats/test_h5_attrs.py compares them with h5py's own).

Only plain scalars take that path: ``str`` (variable-length UTF-8, as h5py stores it), ``bool``,
Python and numpy integers and floats. Anything else goes through h5py's own assignment.
"""

from __future__ import annotations

import h5py
import numpy as np
from h5py import h5a, h5s, h5t

_STR = h5py.string_dtype()  # what h5py stores a str attribute as: variable-length UTF-8
_SCALARS = (bool, int, float, np.bool_, np.integer, np.floating)


class ScalarAttrs:
    """``attrs[name] = value`` on one HDF5 object (a file, a group, a dataset)."""

    def __init__(self, obj: h5py.HLObject) -> None:
        self._obj = obj
        self._space = h5s.create(h5s.SCALAR)
        self._types: dict[object, tuple] = {}  # kind of value -> (file type, memory type)

    def __setitem__(self, name: str, value) -> None:
        data = _scalar(value)
        if data is None:
            self._obj.attrs[name] = value
            return
        stored, memory = self._types_of(data.dtype)
        key = name.encode("utf-8")
        if h5a.exists(self._obj.id, key):
            h5a.delete(self._obj.id, key)
        attr = h5a.create(self._obj.id, key, stored, self._space)
        try:
            attr.write(data, mtype=memory)
        except Exception:
            attr.close()
            h5a.delete(self._obj.id, key)
            raise
        attr.close()

    def _types_of(self, dtype: np.dtype) -> tuple:
        # a str's dtype is object dtype with h5py's tag, equal to an untagged one: key on the tag too
        kind = (dtype.str, h5py.check_string_dtype(dtype) is not None)
        if kind not in self._types:
            self._types[kind] = (h5t.py_create(dtype, logical=True), h5t.py_create(dtype))
        return self._types[kind]


def _scalar(value) -> np.ndarray | None:
    """``value`` as the 0-d array h5py would make of it, or None when it is not a plain scalar."""
    if isinstance(value, str):
        return np.array(value, dtype=_STR)
    if isinstance(value, _SCALARS):
        data = np.asarray(value)
        return data if data.dtype.kind in "biuf" else None  # an int past 64 bits: object dtype
    return None
