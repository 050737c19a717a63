"""HDF5 layout of h5pipe outputs and their readers (the streaming writer: ``formats.h5_writer``).

Layout (no h5py vlen types, so any HDF5 reader can use the files):

- fixed-length key (packed output): 2-D dataset ``key`` of shape ``[n, pack_size]``;
- variable-length key: 1-D dataset ``key`` holding all sequences back to back, plus
  ``key_offsets`` (int64, ``n + 1``): sequence ``i`` is ``key[offsets[i]:offsets[i+1]]``;
- a boundary list without values of its own, e.g. ``document_offsets`` (int64, starts with 0):
  document ``d`` is items ``document_offsets[d]:document_offsets[d+1]`` of another key.

Small datasets are contiguous, exactly their size; larger ones are chunked and grow as batches
arrive (see ``formats.h5_writer``). Token ids may be stored as uint16 (attribute ``narrowed``); the
readers here return them in the dtype they were written from. Attributes describe the file (format version,
tokenizer, processor, counts, source hash; dicts are stored as JSON strings). The attribute
``complete`` is written last, just before the file is closed: a file without it is partial.
"""

from __future__ import annotations

import json

import h5py
import numpy as np

from pipeline_core.formats.positions import POSITION_IDS, derived_keys, read_position_ids
from pipeline_core.storage.fs import url_to_fs

OFFSETS_SUFFIX = "_offsets"
COMPLETE_ATTR = "complete"

NARROW_IDS = np.dtype(np.uint16)
NARROWED_ATTR = "narrowed"  # {key: dtype it is read as}, for keys stored in a narrower dtype


def is_complete(handle: h5py.File) -> bool:
    return bool(handle.attrs.get(COMPLETE_ATTR, False))


def require_complete(handle: h5py.File, url: str) -> None:
    if not is_complete(handle):
        raise ValueError(
            f"{url} has no {COMPLETE_ATTR!r} attribute: it is partial (its writer was interrupted) or not an "
            "h5pipe output; re-run the cache stage for it or remove it from the folder"
        )


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
    """``{key: 2-D tensor}`` for fixed-length keys, ``{key: [1-D tensor, ...]}`` for variable ones, in
    the dtypes written (int32 ids). Derived ``position_ids`` (see ``formats.positions``) come back as
    stored ones would: int32. A file without the ``complete`` attribute (partial) is refused, as
    ``H5Dataset`` refuses it."""
    import torch

    out = {}
    with open_h5(file_path, storage_options) as f:
        require_complete(f, file_path)
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
