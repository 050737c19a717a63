"""HDF5 layout of h5pipe outputs, with a streaming writer and a reader.

Layout (no h5py vlen types, so any HDF5 reader can use the files):

- fixed-length key (packed output): 2-D dataset ``key`` of shape ``[n, pack_size]``;
- variable-length key: 1-D dataset ``key`` holding all sequences back to back, plus
  ``key_offsets`` (int64, ``n + 1``): sequence ``i`` is ``key[offsets[i]:offsets[i+1]]``;
- a boundary list without values of its own, e.g. ``document_offsets`` (int64, starts with 0):
  document ``d`` is items ``document_offsets[d]:document_offsets[d+1]`` of another key.

Small datasets are contiguous, exactly their size; larger ones are chunked and grow as batches
arrive (see ``H5Writer``). Token ids may be stored as uint16 (attribute ``narrowed``); the
readers here return them in the dtype they were written from. Attributes describe the file (format version,
tokenizer, processor, counts, source hash; dicts are stored as JSON strings). The attribute
``complete`` is written last, just before the file is closed: a file without it is partial.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field

import h5py
import numpy as np

from pipeline_core.formats.positions import POSITION_IDS, derived_keys, read_position_ids
from pipeline_core.formats.ragged import Ragged
from pipeline_core.storage.fs import join_url, local_staging, url_to_fs
from pipeline_core.version import FORMAT_VERSION

OFFSETS_SUFFIX = "_offsets"
FLAT_CHUNK = 1 << 18  # elements per HDF5 chunk of a flat dataset (1 MiB of int32)
COMPLETE_ATTR = "complete"


SMALL_BYTES = 8 << 20  # a dataset that stays under this is written whole at close, exactly its size
COMPRESSIONS = (None, "gzip", "lzf")
NARROW_IDS = np.dtype(np.uint16)
NARROWED_ATTR = "narrowed"  # {key: dtype it is read as}, for keys stored in a narrower dtype


@dataclass
class _Column:
    """One dataset being written: buffered while small, then a chunked, growing dataset."""

    dtype: np.dtype
    chunks: tuple[int, ...]
    pending: list[np.ndarray] = field(default_factory=list)
    pending_bytes: int = 0
    dataset: h5py.Dataset | None = None


class H5Writer:
    """Append batches to a local HDF5 file; ``close(complete=True)`` marks it complete.

    A dataset is held in memory until it passes ``SMALL_BYTES``: one that never does is written at
    close contiguous (or, compressed, as one chunk of its own size), so a small file is its data
    plus a header; a larger one becomes a chunked dataset that grows batch by batch (chunks of
    ~1 MiB, the last one allocated whole). ``compression`` (``gzip`` or ``lzf``) applies to every
    dataset and is recorded in the ``compression`` attribute. ``narrow`` maps keys to a narrower
    stored dtype (token ids as uint16 when the vocabulary fits); a value that does not fit is
    refused, never wrapped, and readers get the original dtype back (``narrowed`` attribute).
    """

    def __init__(self, path: str, compression: str | None = None, narrow: dict[str, np.dtype] | None = None) -> None:
        if compression not in COMPRESSIONS:
            raise ValueError(f"compression={compression!r} is not one of {COMPRESSIONS}; use gzip, lzf or None")
        self.file = h5py.File(path, "w", libver="latest")
        self.file.attrs["format_version"] = str(FORMAT_VERSION)  # h5py stores plain str only
        if compression:
            self.file.attrs["compression"] = compression
        self.compression, self.narrow = compression, dict(narrow or {})
        self._columns: dict[str, _Column] = {}
        self._narrowed: dict[str, str] = {}
        self._ends: dict[str, int] = {}

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
        if column.dataset is not None:
            _extend(column.dataset, values)
            return
        column.pending.append(values)
        column.pending_bytes += size
        if column.pending_bytes > SMALL_BYTES:
            self._grow(key, column)

    def _column(self, key: str, dtype: np.dtype, chunks: tuple[int, ...]) -> _Column:
        stored = self.narrow.get(key)
        if stored is not None and np.dtype(stored) != dtype:
            self._narrowed[key] = np.dtype(dtype).name
            dtype = np.dtype(stored)
        self._columns[key] = _Column(np.dtype(dtype), chunks)
        return self._columns[key]

    def _check_fits(self, key: str, values: np.ndarray) -> None:
        stored = self.narrow.get(key)
        if stored is None or not values.size or np.dtype(stored) == values.dtype:
            return
        low, high = int(values.min()), int(values.max())
        info = np.iinfo(stored)
        if low < info.min or high > info.max:
            raise ValueError(
                f"{key}: value {high if high > info.max else low} does not fit the stored {np.dtype(stored)} "
                "(the tokenizer's vocab_size is smaller than its ids); report this with the tokenizer"
            )

    def _grow(self, key: str, column: _Column) -> None:
        data = _joined(column)
        shape = (0, *data.shape[1:])
        maxshape = (None, *data.shape[1:])
        column.dataset = self.file.create_dataset(
            key, shape=shape, maxshape=maxshape, dtype=column.dtype, chunks=column.chunks, **self._filters()
        )
        column.pending, column.pending_bytes = [], 0
        _extend(column.dataset, data)

    def _write_whole(self, key: str, column: _Column) -> None:
        data = _joined(column)
        chunks = data.shape if self.compression and data.size else None
        options = self._filters() if chunks else {}
        column.dataset = self.file.create_dataset(key, data=data, dtype=column.dtype, chunks=chunks, **options)
        column.pending, column.pending_bytes = [], 0

    def _filters(self) -> dict:
        return {"compression": self.compression} if self.compression else {}

    def flush(self) -> None:
        """Write every dataset still held in memory (the file then holds every key appended to)."""
        for key, column in self._columns.items():
            if column.dataset is None:
                self._write_whole(key, column)
        if self._narrowed:
            self.file.attrs[NARROWED_ATTR] = encode_attr(self._narrowed)

    def data_keys(self) -> list[str]:
        self.flush()
        return data_keys(self.file)

    def set_attrs(self, attrs: dict) -> None:
        for name, value in attrs.items():
            self.file.attrs[name] = encode_attr(value)

    def close(self, complete: bool = True) -> None:
        self.flush()
        if complete:
            self.file.attrs[COMPLETE_ATTR] = True
        self.file.close()


def _joined(column: _Column) -> np.ndarray:
    if not column.pending:
        return np.zeros(0, column.dtype)
    if len(column.pending) == 1:
        return np.asarray(column.pending[0], dtype=column.dtype)
    return np.concatenate(column.pending).astype(column.dtype, copy=False)


def is_complete(handle: h5py.File) -> bool:
    return bool(handle.attrs.get(COMPLETE_ATTR, False))


def require_complete(handle: h5py.File, url: str) -> None:
    if not is_complete(handle):
        raise ValueError(
            f"{url} has no {COMPLETE_ATTR!r} attribute: it is partial (its writer was interrupted) or not an "
            "h5pipe output; re-run the cache stage for it or remove it from the folder"
        )


def _extend(dataset: h5py.Dataset, values: np.ndarray) -> None:
    if len(values) == 0:
        return
    start = dataset.shape[0]
    dataset.resize(start + len(values), axis=0)
    dataset[start:] = values


def encode_attr(value):
    if value is None or isinstance(value, (dict, list, tuple)):
        return json.dumps(value, sort_keys=True, ensure_ascii=False)
    if isinstance(value, str):
        return str(value)  # a str subclass (FORMAT_VERSION) has no HDF5 type; its plain text has
    return value


def decode_attr(value):
    if isinstance(value, bytes):
        value = value.decode("utf-8")
    if isinstance(value, str) and (value[:1] in "{[" or value == "null") and value:
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    if isinstance(value, np.generic):
        return value.item()
    return value


def open_h5(url: str, storage_options: dict | None = None):
    """Open an HDF5 file for reading from any fsspec URL; refuses files that point outside themselves
    (see ``refuse_links``)."""
    fs, path = url_to_fs(url, storage_options)
    handle = h5py.File(fs.open(path, "rb"), "r") if not _is_local_path(fs) else h5py.File(path, "r")
    refuse_links(handle, url)
    return handle


def _is_local_path(fs) -> bool:
    from pipeline_core.storage.fs import is_local

    return is_local(fs)


def refuse_links(handle: h5py.File, url: str) -> None:
    """Refuse a file that reaches outside itself: any non-hard link (external or soft, at any depth),
    a dataset stored in external raw files (``external=[...]``, which can name any file on the
    machine) or a virtual dataset (mapped from other files)."""
    try:
        problem = outside_reference(handle)
    except BaseException:  # a damaged file can fail while being walked
        handle.close()
        raise
    if problem is not None:
        handle.close()
        raise ValueError(
            f"{url}: {problem}; h5pipe reads only self-contained files (no links, external or virtual datasets)"
        )


def outside_reference(group: h5py.Group, seen: set | None = None) -> str | None:
    """What in the group (recursively) points outside the file, or None. Links are inspected
    without being followed; a group hard-linked twice is walked once."""
    seen = set() if seen is None else seen
    for name in group:
        link = group.get(name, getlink=True)
        path = f"{group.name.rstrip('/')}/{name}"
        if not isinstance(link, h5py.HardLink):
            return f"{path!r} is a {type(link).__name__}"
        obj = group[name]
        if obj.id in seen:
            continue
        seen.add(obj.id)
        if isinstance(obj, h5py.Dataset) and (obj.external or obj.is_virtual):
            return f"{path!r} is {'an external' if obj.external else 'a virtual'} dataset"
        if isinstance(obj, h5py.Group) and (problem := outside_reference(obj, seen)) is not None:
            return problem
    return None


def read_attrs(url: str, storage_options: dict | None = None) -> dict:
    """The file attributes of an h5pipe HDF5 file (tokenizer, processor, packing, counts), decoded."""
    with open_h5(url, storage_options) as f:
        return {k: decode_attr(v) for k, v in f.attrs.items()}


def data_keys(handle: h5py.File) -> list[str]:
    return [k for k in handle if not k.endswith(OFFSETS_SUFFIX)]


def reader_keys(handle: h5py.File) -> list[str]:
    """The keys readers give: the stored ones plus any the file derives (``position_ids``), in
    name order as h5py lists stored ones."""
    derived = derived_keys(handle)
    return sorted([*data_keys(handle), *derived]) if derived else data_keys(handle)


def read_whole(handle: h5py.File, key: str) -> np.ndarray:
    """Every value of ``key`` in the dtype it was written from (derived keys computed)."""
    if key == POSITION_IDS and key not in handle:
        return read_position_ids(handle)
    return widened(handle[key][...])


def load_h5(file_path: str, share_memory: bool = False, storage_options: dict | None = None) -> dict:
    """``{key: 2-D tensor}`` for fixed-length keys, ``{key: [1-D tensor, ...]}`` for variable ones.
    Derived ``position_ids`` (see ``formats.positions``) come back as stored ones would: int32."""
    import torch

    out = {}
    with open_h5(file_path, storage_options) as f:
        for key in reader_keys(f):
            values = torch.from_numpy(read_whole(f, key))
            if share_memory:
                values.share_memory_()
            if key + OFFSETS_SUFFIX in f:
                offsets = f[key + OFFSETS_SUFFIX][...]
                values = [values[offsets[i] : offsets[i + 1]] for i in range(len(offsets) - 1)]
            out[key] = values
    return out


def narrowed_keys(handle: h5py.File) -> dict[str, str]:
    """Keys stored in a narrower dtype than written, with the dtype they were written in."""
    return decode_attr(handle.attrs.get(NARROWED_ATTR, "{}")) or {}


def widened(values: np.ndarray) -> np.ndarray:
    """Values as written: h5pipe narrows only int32 keys, and only to uint16 (``narrowed`` attribute)."""
    return values.astype(np.int32) if values.dtype == NARROW_IDS else values


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
