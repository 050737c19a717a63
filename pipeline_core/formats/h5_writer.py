"""H5Writer: the streaming writer of the HDF5 layout ``formats.h5`` describes and reads.

Datasets are buffered while small and written whole, contiguous, at close; larger ones become
chunked datasets that grow batch by batch, written by a thread of the writer's own (see
``formats.write_behind``). ``save_h5`` writes a whole dict of tensors at once.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Literal

import h5py
import numpy as np
from h5py import h5d, h5p, h5s

from pipeline_core.formats.h5 import COMPLETE_ATTR, NARROWED_ATTR, OFFSETS_SUFFIX, data_keys, encode_attr
from pipeline_core.formats.h5_attrs import ScalarAttrs
from pipeline_core.formats.h5_direct import h5py_types
from pipeline_core.formats.ragged import Ragged
from pipeline_core.formats.write_behind import WriteBehind
from pipeline_core.storage.fs import join_url, local_staging, url_to_fs
from pipeline_core.version import FORMAT_VERSION

FLAT_CHUNK = 1 << 18  # elements per HDF5 chunk of a flat dataset (1 MiB of int32)
SMALL_BYTES = 8 << 20  # a dataset that stays under this is written whole at close, exactly its size
# HDF5's chunk cache per dataset. Appends fill each chunk once, in order, so two chunks are all a
# writer needs; with HDF5's default here (8 MiB) a 10 MB chunk's ids stayed in the cache and were
# written by the close, in the caller's thread, instead of by the write-behind thread.
CHUNK_CACHE_BYTES = 2 << 20
COMPRESSIONS = (None, "gzip", "lzf")
READ_AS = np.dtype(np.int32)  # what a narrowed key is read back as (h5pipe narrows int32 keys only)


@dataclass
class _Column:
    """One dataset being written: buffered while small, then a chunked, growing dataset."""

    dtype: np.dtype
    chunks: tuple[int, ...]
    pending: list[np.ndarray] = field(default_factory=list)
    pending_bytes: int = 0
    # "pending" while buffered; "chunked" once it grows (its dataset is created by the writer
    # thread); "whole" once written whole at close, set before the write so a failed one is not retried
    state: Literal["pending", "chunked", "whole"] = "pending"
    # open until the file closes: a dataset closed on its own while the disk was full left HDF5
    # in a state whose file close crashed the process (tests/flows/test_fail_clearly.py, full disk)
    dataset: h5py.Dataset | h5d.DatasetID | None = None


class H5Writer:
    """Append batches to a local HDF5 file; ``close(complete=True)`` marks it complete.

    A dataset is held in memory until it passes ``SMALL_BYTES``: one that never does is written at
    close contiguous (or, compressed, as one chunk of its own size), so a small file is its data
    plus a header; a larger one becomes a chunked dataset that grows batch by batch (chunks of
    ~1 MiB, the last one allocated whole). ``compression`` (``gzip`` or ``lzf``) applies to every
    dataset and is recorded in the ``compression`` attribute. ``narrow`` maps int32 keys to a
    narrower stored dtype (token ids as uint16 when the vocabulary fits, packed position ids when
    the pack size does); their values may arrive as int32 or in the stored dtype, a value that
    does not fit is refused, never wrapped, and readers get int32 back (``narrowed`` attribute).
    """

    def __init__(self, path: str, compression: str | None = None, narrow: dict[str, np.dtype] | None = None) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression={compression!r} is not one of {COMPRESSIONS}; use gzip, lzf or None")
        self.file = h5py.File(path, "w", libver="latest", rdcc_nbytes=CHUNK_CACHE_BYTES)
        self._attrs = ScalarAttrs(self.file)  # as ``file.attrs``, at about half the cost (see there)
        self._attrs["format_version"] = str(FORMAT_VERSION)  # h5py stores plain str only
        if compression:
            self._attrs["compression"] = compression
        self.compression, self.narrow = compression, dict(narrow or {})
        self._columns: dict[str, _Column] = {}
        self._narrowed: dict[str, str] = {}
        self._ends: dict[str, int] = {}
        self._behind: WriteBehind | None = None  # started with the first chunked dataset

    def append_ragged(self, key: str, ragged: Ragged) -> None:
        self._append(key, ragged.values, (FLAT_CHUNK,))
        self.append_lengths(key + OFFSETS_SUFFIX, ragged.lengths)

    def append_lengths(self, name: str, lengths: np.ndarray) -> None:
        """Extend the offsets dataset ``name`` (int64, starting with 0) by items of ``lengths``."""
        if name not in self._columns:
            self._append(name, np.zeros(1, np.int64), (1 << 14,))
            self._ends[name] = 0
        ends = self._ends[name] + np.cumsum(lengths, dtype=np.int64)
        self._append(name, ends, (1 << 14,))
        if ends.size:
            self._ends[name] = int(ends[-1])

    def append_fixed(self, key: str, rows: np.ndarray) -> None:
        width = rows.shape[1]
        chunk_rows = max(1, min(1024, FLAT_CHUNK // max(width, 1)))
        self._append(key, rows, (chunk_rows, width))

    def _append(self, key: str, values: np.ndarray, chunks: tuple[int, ...]) -> None:
        self._check_fits(key, values)
        column = self._columns.get(key) or self._column(key, values.dtype, chunks)
        size = values.nbytes  # before narrowing: when a dataset turns chunked stays as it was
        if key in self.narrow:  # by numpy, checked to fit above: HDF5's own conversion is slower
            values = values.astype(column.dtype, copy=False)
        if column.state == "chunked":
            self._write_behind(_extend_column, column, values)
            return
        column.pending.append(values)
        column.pending_bytes += size
        if column.pending_bytes > SMALL_BYTES:
            self._grow(key, column)

    def _column(self, key: str, dtype: np.dtype, chunks: tuple[int, ...]) -> _Column:
        stored = self.narrow.get(key)
        if stored is not None and np.dtype(stored) != READ_AS:
            # int32 whatever the values arrive in: int32, or the stored dtype already (packed
            # position ids, see formats.positions.position_dtype)
            self._narrowed[key] = READ_AS.name
            dtype = np.dtype(stored)
        self._columns[key] = _Column(np.dtype(dtype), chunks)
        return self._columns[key]

    def _check_fits(self, key: str, values: np.ndarray) -> None:
        stored = self.narrow.get(key)
        if stored is None or not values.size or np.dtype(stored) == values.dtype:
            return
        info = np.iinfo(stored)
        if _fits_unsigned(values, info):
            return
        low, high = int(values.min()), int(values.max())
        if low < info.min or high > info.max:
            raise ValueError(
                f"{key}: value {high if high > info.max else low} does not fit the stored {np.dtype(stored)} "
                "(the tokenizer's vocab_size is smaller than its ids); report this with the tokenizer"
            )

    def _grow(self, key: str, column: _Column) -> None:
        data = _joined(column)
        column.pending, column.pending_bytes, column.state = [], 0, "chunked"
        self._write_behind(self._create, key, column, data)

    def _create(self, key: str, column: _Column, data: np.ndarray) -> None:
        """In the writer thread, like every change to the file until the next wait: the file's
        bytes then come out the same whatever the threads' timing."""
        shape = (0, *data.shape[1:])
        maxshape = (None, *data.shape[1:])
        column.dataset = self.file.create_dataset(
            key, shape=shape, maxshape=maxshape, dtype=column.dtype, chunks=column.chunks, **self._filters()
        )
        _extend(column.dataset, data)

    def _write_behind(self, write, *args) -> None:
        if self._behind is None:
            self._behind = WriteBehind()
        self._behind.submit(write, *args)

    def _wait_writes(self) -> None:
        if self._behind is not None:
            self._behind.wait()

    def _write_whole(self, key: str, column: _Column) -> None:
        data = _joined(column)
        column.pending, column.pending_bytes, column.state = [], 0, "whole"  # its name exists even if the write fails
        if self.compression and data.size:
            options = self._filters()
            column.dataset = self.file.create_dataset(key, data=data, dtype=column.dtype, chunks=data.shape, **options)
        else:
            column.dataset = _write_contiguous(self.file, key, data)

    def _filters(self) -> dict:
        return {"compression": self.compression} if self.compression else {}

    def flush(self) -> None:
        """Write every dataset still held in memory (the file then holds every key appended to)."""
        self._wait_writes()
        for key, column in self._columns.items():
            if column.state == "pending":
                self._write_whole(key, column)
        if self._narrowed:
            self._attrs[NARROWED_ATTR] = encode_attr(self._narrowed)

    def data_keys(self) -> list[str]:
        """``formats.h5.data_keys`` of the file, from the datasets this writer made (only it makes
        any): h5py's iteration over the file's links cost ~5% of a small chunk's stage."""
        self.flush()
        if any("/" in key for key in self._columns):  # keys in groups: the file's top-level names
            return data_keys(self.file)
        # HDF5 lists a group's links by name, byte by byte: UTF-8 keeps code point order
        return sorted(key for key in self._columns if not key.endswith(OFFSETS_SUFFIX))

    def set_attrs(self, attrs: dict) -> None:
        self._wait_writes()
        for name, value in attrs.items():
            self._attrs[name] = encode_attr(value)

    def close(self, complete: bool = True) -> None:
        """Closed whatever happens; ``complete`` is set only once every write has succeeded."""
        try:
            self.flush()
            if complete:
                self._attrs[COMPLETE_ATTR] = True
        finally:
            if self._behind is not None:
                self._behind.shutdown()  # flush waited for its writes, raised or not
            self.file.close()


def _fits_unsigned(values: np.ndarray, info: np.iinfo) -> bool:
    """True when signed or unsigned integers fit the unsigned ``info`` type, in one pass over them:
    viewed as unsigned of their own width, a negative value is above any narrower maximum. False
    also when the test does not apply (a signed stored type, other dtypes): check both ends then."""
    if info.min != 0 or values.dtype.kind not in "iu" or values.dtype.itemsize * 8 <= info.bits:
        return False
    unsigned = values.view(np.dtype(f"u{values.dtype.itemsize}"))
    return int(unsigned.max()) <= info.max


def _joined(column: _Column) -> np.ndarray:
    if not column.pending:
        return np.zeros(0, column.dtype)
    if len(column.pending) == 1:
        return np.asarray(column.pending[0], dtype=column.dtype)
    return np.concatenate(column.pending).astype(column.dtype, copy=False)


@functools.cache
def _contiguous_plist() -> h5p.PropDCID:
    """The creation properties h5py's ``create_dataset`` gives a contiguous dataset with no
    filters (``filters.fill_dcpl`` sets none for it; ``make_new_dset`` turns off time tracking)."""
    plist = h5p.create(h5p.DATASET_CREATE)
    plist.set_obj_track_times(False)
    return plist


def _write_contiguous(file: h5py.File, key: str, data: np.ndarray) -> h5d.DatasetID | h5py.Dataset:
    """``file.create_dataset(key, data=data)``, contiguous: the low-level calls h5py makes, with
    the property list and type made once for the process. h5py's option handling around them
    cost ~120 k instructions of a dataset's ~380 k, 4 datasets in every output file. The file's
    bytes are h5py's (tests/pipeline_core/formats/test_h5_contiguous.py). Returns the dataset,
    which the writer keeps open until the file closes (see ``_Column.dataset``)."""
    if "/" in key:  # h5py makes the groups on the way
        return file.create_dataset(key, data=data)
    data = np.ascontiguousarray(data)
    space = h5s.create_simple(data.shape)
    dataset = h5d.create(file.id, key.encode("utf-8"), h5py_types(data.dtype)[0], space, dcpl=_contiguous_plist())
    dataset.write(h5s.ALL, h5s.ALL, data)
    return dataset


def _extend_column(column: _Column, values: np.ndarray) -> None:
    _extend(column.dataset, values)


def _extend(dataset: h5py.Dataset, values: np.ndarray) -> None:
    if len(values) == 0:
        return
    start = dataset.shape[0]
    dataset.resize(start + len(values), axis=0)
    dataset[start:] = values


def save_h5(
    output_dir: str, file_name: str, tensor_group: dict, attrs: dict | None = None, storage_options: dict | None = None
) -> str:
    """Write ``{key: 2-D tensor | list of 1-D tensors}`` as one HDF5 file, atomically."""
    url = join_url(str(output_dir), file_name)
    fs, root = url_to_fs(str(output_dir), storage_options)
    fs.makedirs(root, exist_ok=True)
    with local_staging(url, storage_options, suffix=".h5") as tmp:
        writer = H5Writer(tmp)
        for key, value in tensor_group.items():
            if isinstance(value, (list, tuple)):
                writer.append_ragged(key, Ragged.from_lists([np.asarray(v) for v in value], dtype=_dtype_of(value)))
            else:
                writer.append_fixed(key, np.asarray(value))
        writer.set_attrs(attrs or {})
        writer.close()
    return url


def _dtype_of(values) -> np.dtype:
    return np.asarray(values[0]).dtype if len(values) else np.dtype(np.int32)
