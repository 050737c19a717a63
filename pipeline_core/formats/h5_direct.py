"""Scalar attributes created by calling the HDF5 C library that h5py loaded, past h5py's wrappers.

``formats.h5_attrs.ScalarAttrs`` makes the low-level calls h5py makes for an attribute (create,
write, close); through h5py each call builds Python objects (an identifier registered in a weak
dictionary, its lock, its error checks) that cost more than HDF5's own work: per output file, 47
attributes took 4.5 M instructions that way and 2.7 M this way (callgrind), of the ~10 M a
one-row chunk costs the cache stage. Here the same three C functions are called through ctypes,
with h5py's own lock (``phil``) held and the HDF5 types h5py would use, so the file's bytes are
h5py's (tests/pipeline_core/formats/test_h5_attrs.py compares them).

Only plain Python values take this path: ``str`` without a NUL, ``bool``, ``int`` within int64,
``float``. ``create`` returns False, having written nothing, for anything else and whenever HDF5
refuses the create (a name that exists): the caller then goes through h5py, which replaces,
converts or raises as it always does. ``direct_attrs()`` is None when the library cannot be
reached this way (no ``H5Acreate2`` through h5py's extension, an HDF5 older than 1.10 whose
identifiers are not 64 bits, no ``phil``); h5py's path is used then.
"""

from __future__ import annotations

import ctypes
import functools

import h5py
import numpy as np
from h5py import h5a, h5s, h5t

_HID = ctypes.c_int64  # hid_t since HDF5 1.10
_INT64 = range(-(1 << 63), 1 << 63)
_DEFAULT = 0  # H5P_DEFAULT


class DirectAttrs:
    """``create(h5py object id, name, value)`` for the plain values the module's docstring lists."""

    def __init__(self, lib: ctypes.CDLL, lock) -> None:
        self._create = _function(lib.H5Acreate2, _HID, [_HID, ctypes.c_char_p, _HID, _HID, _HID, _HID])
        self._write = _function(lib.H5Awrite, ctypes.c_int, [_HID, _HID, ctypes.c_void_p])
        self._close = _function(lib.H5Aclose, ctypes.c_int, [_HID])
        self._lock = lock
        # (file type, memory type) as h5py makes them for the value's numpy dtype; the objects are
        # kept so their identifiers stay open
        self._types = {kind: h5py_types(np.asarray(sample).dtype) for kind, sample in _SAMPLES.items()}
        self._types[str] = (h5t.py_create(h5py.string_dtype(), logical=True),) * 2  # char* in memory
        self._space = h5s.create(h5s.SCALAR)

    def create(self, loc, name: bytes, value) -> bool:
        """True once ``loc`` (an h5py ObjectID) has the attribute ``name`` holding ``value``; False,
        with nothing written, when ``value`` is not one this path takes or HDF5 refused the name."""
        buffer = _buffer(value)
        if buffer is None:
            return False
        file_type, memory_type = self._types[type(value)]
        with self._lock:
            attr = self._create(loc.id, name, file_type.id, self._space.id, _DEFAULT, _DEFAULT)
            if attr < 0:
                return False
            written = self._write(attr, memory_type.id, buffer) >= 0
            self._close(attr)
            if not written:
                h5a.delete(loc, name)
        if not written:
            raise OSError(f"HDF5 could not write the attribute {name.decode('utf-8', 'replace')!r}")
        return True


_SAMPLES = {bool: True, int: 0, float: 0.0}


@functools.cache
def h5py_types(dtype: np.dtype) -> tuple[h5t.TypeID, h5t.TypeID]:
    """(file type, memory type) as h5py makes them for a numeric ``dtype``, once per process (the
    objects stay alive, so their identifiers stay open). Not for object dtypes: numpy compares
    dtypes without their metadata, so h5py's string dtype would share an entry with plain objects."""
    return h5t.py_create(dtype, logical=True), h5t.py_create(dtype)


def _buffer(value):
    """A pointer to ``value`` in its memory type, or None when this path does not take it."""
    kind = type(value)
    if kind is str:
        if "\x00" in value:
            return None
        try:
            return ctypes.byref(ctypes.c_char_p(value.encode("utf-8")))
        except UnicodeEncodeError:  # a lone surrogate: h5py's own error
            return None
    if kind is bool:
        return ctypes.byref(ctypes.c_int8(value))
    if kind is int:
        return ctypes.byref(ctypes.c_int64(value)) if value in _INT64 else None
    if kind is float:
        return ctypes.byref(ctypes.c_double(value))
    return None


def _function(pointer, restype, argtypes):
    pointer.restype, pointer.argtypes = restype, argtypes
    return pointer


@functools.cache
def direct_attrs() -> DirectAttrs | None:
    """The process's DirectAttrs, or None when h5py's HDF5 cannot be called this way."""
    try:
        from h5py import defs
        from h5py._objects import phil

        if h5py.version.hdf5_version_tuple < (1, 10, 0):
            return None
        return DirectAttrs(ctypes.CDLL(defs.__file__), phil)
    except (AttributeError, ImportError, OSError):
        return None
