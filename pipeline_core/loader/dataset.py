"""H5Dataset: a torch ``Dataset`` over a folder of h5pipe HDF5 files.

Item ``i`` counts across the files in natural order (``chunk_2`` before ``chunk_10``). An item is
``{key: tensor}``: for packed files a row of every ``[n, pack_size]`` key plus the pack's
``cu_seqlens``; for unpacked files each sample's slice of every flat key (via ``{key}_offsets``);
for sentence-level files one sentence. A packed file written with ``position_ids: derived`` gives
``position_ids`` too, computed from its ``cu_seqlens`` (the same values). Only complete files (attribute ``complete``) are accepted.

Integer keys come back int64 (``LongTensor``, what embeddings and ``F.cross_entropy`` take) whatever
the stored width (int32, uint16...), except ``cu_seqlens``, which stays int32 as flash-attention's
varlen kernels take it, and ``media``, which stays the uint8 bytes of its UTF-8 JSON. ``labels=True`` adds ``labels``: the ids with -100 wherever ``loss_mask`` is
False (HF/TRL's convention; a pt file, which has no mask, trains every token but a pack's pads),
computed on read, the files unchanged (and ``{key}_labels`` from
``{key}_mask`` for other token keys, e.g. DPO's ``chosen``); in a packed row the label at every
document start is -100 too, as transformers' ``DataCollatorWithFlattening`` makes it: a causal
loss would predict it from the previous document's last token, across documents. Batch items with ``h5_collate``
(``collate``), which pads unpacked samples and keeps packed rows' boundaries.

h5py handles do not survive ``fork``: files are opened on first access in each process (the
handles are keyed by pid), so a ``DataLoader`` with workers just works. ``share_memory=True``
instead reads everything once into shared memory that all workers read without copying.

A remote folder (any fsspec URL) is downloaded once into ``cache_dir`` and reused while it is
the same file (loader/downloads.py).

A folder with a manifest gives exactly the files it commits (see docs/commit-protocol.md).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from pipeline_core.formats.h5 import OFFSETS_SUFFIX, decode_attr, reader_keys, refuse_links, require_complete
from pipeline_core.formats.positions import POSITION_IDS, pack_rows, read_position_ids
from pipeline_core.loader.collate import CU_SEQLENS, IGNORE_INDEX, H5Collate, document_starts
from pipeline_core.loader.downloads import local_files

LABEL_SOURCES = (("sequence", "loss_mask", "labels"),)
KEEP_DTYPE = ("cu_seqlens", "media")  # int32 for varlen kernels; UTF-8 JSON bytes, never token ids


class H5Dataset(Dataset):
    """A PyTorch ``Dataset`` over a folder (local or any fsspec URL) of h5pipe HDF5 files, or one file.

    ``ds[i]`` is ``{key: tensor}``: a packed row of every ``[n, pack_size]`` key plus its
    ``cu_seqlens``, or one sample's slice of every flat key; integer ids come back int64. Items
    count across the files in natural order; only files marked complete are read. ``keys`` limits
    the keys read (default all; packed files always give their ``cu_seqlens`` and ``position_ids``,
    the documents' boundaries); ``labels=True`` adds ``labels`` (-100 where not trained);
    ``share_memory=True`` loads every file once into shared memory for the workers. Works with
    ``DataLoader`` workers (handles are opened per process) and ``h5_collate``.
    """

    def __init__(
        self,
        path_or_url: str | os.PathLike,
        keys: list[str] | None = None,
        share_memory: bool = False,
        *,
        labels: bool = False,
        cache_dir: str | None = None,
        storage_options: dict | None = None,
    ) -> None:
        self.paths = local_files(str(path_or_url), cache_dir, storage_options)
        indexes = [FileIndex.read(path, keys) for path in self.paths]
        first = _check_same_keys(indexes, self.paths)
        self.keys, self.ragged = list(first.keys), first.ragged
        self.attrs = [index.attrs for index in indexes]
        self.label_keys = _label_keys(self.keys, self.paths[0], self.attrs[0]) if labels else ()
        self._ends = np.cumsum([index.length for index in indexes])
        self._handles: dict[int, h5py.File] = {}
        self._pid = os.getpid()
        self._memory = [_load_shared(p, self.keys, self.ragged) for p in self.paths] if share_memory else None

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        f, local = self._locate(i)
        if self._memory is not None:
            item = {k: _widened(k, _slice_shared(self._memory[f][k], local)) for k in self.keys}
        else:
            handle = self._handle(f)
            item = {k: _widened(k, torch.from_numpy(_read(handle, k, local, k in self.ragged))) for k in self.keys}
        for ids, mask, name in self.label_keys:
            item[name] = torch.where(item[mask] if mask else _real_tokens(item, ids), item[ids], IGNORE_INDEX)
            if CU_SEQLENS in item:
                item[name][document_starts(item[CU_SEQLENS])] = IGNORE_INDEX
        return item

    @property
    def collate(self) -> H5Collate:
        """``h5_collate`` padding with the files' pad id (0 when they were written without one)."""
        pads = [a.get(k) for a in self.attrs for k in ("pad_id", "pad_value")]
        return H5Collate(next((int(p) for p in pads if p is not None and int(p) >= 0), 0))

    def close(self) -> None:
        for handle in self._handles.values():
            handle.close()
        self._handles = {}

    def __getstate__(self) -> dict:
        state = self.__dict__.copy()
        state["_handles"] = {}  # reopened in the receiving process
        return state

    def _locate(self, i: int) -> tuple[int, int]:
        n = len(self)
        if not -n <= i < n:
            raise IndexError(f"index {i} out of range for {n} items")
        i = int(i) % n
        f = int(np.searchsorted(self._ends, i, side="right"))
        return f, i - (int(self._ends[f - 1]) if f else 0)

    def _handle(self, f: int) -> h5py.File:
        if self._pid != os.getpid():  # a forked worker: the parent's handles are not usable here
            self._handles, self._pid = {}, os.getpid()
        if f not in self._handles:
            self._handles[f] = _open_checked(self.paths[f])
        return self._handles[f]


def _widened(key: str, value: torch.Tensor) -> torch.Tensor:
    """Integer values as int64 (but ``KEEP_DTYPE`` keys); bools and floats as stored."""
    if key in KEEP_DTYPE or value.dtype in (torch.bool, torch.int64) or value.is_floating_point():
        return value
    return value.to(torch.int64)


def _label_keys(keys: list[str], path: str, attrs: dict) -> tuple[tuple[str, str | None, str], ...]:
    """(ids key, mask key, label key) for every id key with its mask, or for a pt file's ``sequence``
    (written unmasked: every token but a pack's pads trains; an sft file read without its mask is
    refused, never trained whole); an error when there is none."""
    pairs: list[tuple[str, str | None, str]] = [p for p in LABEL_SOURCES if p[0] in keys and p[1] in keys]
    pairs += [(k, f"{k}_mask", f"{k}_labels") for k in keys if f"{k}_mask" in keys]
    if not pairs and "sequence" in keys and attrs.get("processor") == "pt":
        pairs = [("sequence", None, "labels")]
    if not pairs:
        raise KeyError(
            f"labels=True needs a token key with its mask (sequence + loss_mask, or chosen + chosen_mask), or a "
            f"pt file's sequence; {path} has {keys}"
        )
    return tuple(pairs)


def _real_tokens(item: dict[str, torch.Tensor], ids: str) -> torch.Tensor:
    """Every token of an unpacked item; a pack's tokens before its pads (``cu_seqlens[-1]``)."""
    real = torch.ones(item[ids].shape, dtype=torch.bool)
    if CU_SEQLENS in item:
        real[int(item[CU_SEQLENS][-1]) :] = False
    return real


@dataclass(frozen=True, slots=True)
class FileIndex:
    """What a file holds: its item count, its keys by layout, its attributes."""

    length: int
    keys: tuple[str, ...]
    ragged: frozenset[str]  # flat + {key}_offsets
    fixed: frozenset[str]  # [n, width]
    attrs: dict

    @classmethod
    def read(cls, path: str, keys: list[str] | None) -> FileIndex:
        with _open_checked(path) as handle:
            require_complete(handle, path)
            available = reader_keys(handle)  # stored keys and derived position_ids
            if not available:  # every row of its chunk was skipped
                return cls(0, (), frozenset(), frozenset(), _attrs(handle))
            wanted = with_boundaries(keys, available) if keys else available
            missing = [k for k in wanted if k not in available]
            if missing:
                raise KeyError(f"{path} has no key(s) {missing}; available keys: {available}")
            counts = {k: _count(handle, k) for k in wanted}
            attrs = _attrs(handle)
        if len({n for n, _ in counts.values()}) > 1:
            raise ValueError(f"{path}: keys hold different item counts {counts}; pass keys=[...] that belong together")
        ragged = frozenset(k for k in wanted if counts[k][1])
        length = next(iter(counts.values()))[0] if counts else 0
        return cls(length, tuple(wanted), ragged, frozenset(wanted) - ragged, attrs)


def with_boundaries(keys: list[str], available: list[str]) -> list[str]:
    """``keys`` plus a packed file's document boundaries (``cu_seqlens``, ``position_ids``) when
    they omit them: without both, ``h5_collate`` would take the packed rows for unpacked samples
    and a model would attend, and number positions, across the documents of each pack."""
    if CU_SEQLENS not in available:
        return list(keys)
    return [*keys, *(k for k in (CU_SEQLENS, POSITION_IDS) if k in available and k not in keys)]


def _attrs(handle: h5py.File) -> dict:
    return {k: decode_attr(v) for k, v in handle.attrs.items()}


def _count(handle: h5py.File, key: str) -> tuple[int, bool]:
    """(items, is ragged) of one key."""
    if _is_derived(handle, key):
        return pack_rows(handle)[0], False
    if key + OFFSETS_SUFFIX in handle:
        return handle[key + OFFSETS_SUFFIX].shape[0] - 1, True
    if handle[key].ndim == 2:
        return handle[key].shape[0], False
    raise ValueError(f"{handle.filename}: {key!r} is 1-D without {key + OFFSETS_SUFFIX!r}; it is no per-item key")


def _check_same_keys(indexes: list[FileIndex], paths: list[str]) -> FileIndex:
    """The layout all non-empty files share (files without items may lack keys)."""
    filled = [(index, path) for index, path in zip(indexes, paths) if index.keys]
    if not filled:
        return indexes[0]
    first, first_path = filled[0]
    for index, path in filled[1:]:
        if (index.ragged, index.fixed) != (first.ragged, first.fixed):
            raise ValueError(
                f"{path} stores its keys differently from {first_path} (packed vs unpacked, or other keys); "
                "put outputs of one cache run in a folder, or pass keys=[...] present in all files"
            )
    return first


def _is_derived(handle: h5py.File, key: str) -> bool:
    """Whether ``key`` is computed on read (position ids of a ``position_ids: derived`` file)."""
    return key == POSITION_IDS and key not in handle


def _read(handle: h5py.File, key: str, i: int, ragged: bool) -> np.ndarray:
    if _is_derived(handle, key):
        return read_position_ids(handle, i, i + 1)[0]
    if not ragged:
        return _torch_ready(handle[key][i])
    start, stop = handle[key + OFFSETS_SUFFIX][i : i + 2]
    return _torch_ready(handle[key][start:stop])


def _open_checked(path: str) -> h5py.File:
    """Open for reading, refusing files that reach outside themselves (links, external data)."""
    handle = h5py.File(path, "r")
    refuse_links(handle, path)
    return handle


def _load_shared(
    path: str, keys: list[str], ragged: frozenset[str]
) -> dict[str, tuple[torch.Tensor, torch.Tensor | None]]:
    with _open_checked(path) as handle:
        out = {}
        for key in keys:
            # widened once here, so items stay zero-copy views of the shared tensors
            stored = read_position_ids(handle) if _is_derived(handle, key) else _torch_ready(handle[key][...])
            values = _widened(key, torch.from_numpy(stored)).share_memory_()
            offsets = torch.from_numpy(handle[key + OFFSETS_SUFFIX][...]).share_memory_() if key in ragged else None
            out[key] = (values, offsets)
        return out


def _torch_ready(array: np.ndarray) -> np.ndarray:
    """Unsigned ids (e.g. uint16) widened to a dtype every torch build shares; others as stored."""
    if array.dtype.kind == "u" and array.dtype != np.uint8:
        return array.astype(np.int32 if array.dtype.itemsize < 4 else np.int64)
    return array


def _slice_shared(stored: tuple[torch.Tensor, torch.Tensor | None], i: int) -> torch.Tensor:
    values, offsets = stored
    if offsets is None:
        return values[i]
    return values[int(offsets[i]) : int(offsets[i + 1])]
