"""H5Dataset: a torch ``Dataset`` over a folder of h5pipe HDF5 files.

Item ``i`` counts across the files in natural order (``chunk_2`` before ``chunk_10``). An item is
``{key: tensor}``: for packed files a row of every ``[n, pack_size]`` key plus the pack's
``cu_seqlens``; for unpacked files each sample's slice of every flat key (via ``{key}_offsets``);
for sentence-level files one sentence. Only complete files (attribute ``complete``) are accepted.

h5py handles do not survive ``fork``: files are opened on first access in each process (the
handles are keyed by pid), so a ``DataLoader`` with workers just works. ``share_memory=True``
instead reads everything once into shared memory that all workers read without copying.

A remote folder (any fsspec URL) is downloaded once into ``cache_dir`` (default
``$H5PIPE_CACHE``, else ``$H5PIPE_CACHE_DIR`` or ``~/.cache/h5pipe``, see ``_cache_root``); a
cached file is reused while its size matches.
"""

from __future__ import annotations

import hashlib
import os
import uuid
from dataclasses import dataclass

import h5py
import numpy as np
import torch
from torch.utils.data import Dataset

from pipeline_core.formats.h5 import (
    OFFSETS_SUFFIX,
    data_keys,
    decode_attr,
    refuse_links,
    require_complete,
    widened,
)
from pipeline_core.storage import records
from pipeline_core.storage.fs import fetch_files, is_local, url_to_fs


class H5Dataset(Dataset):
    def __init__(
        self,
        path_or_url: str | os.PathLike,
        keys: list[str] | None = None,
        share_memory: bool = False,
        *,
        cache_dir: str | None = None,
        storage_options: dict | None = None,
    ) -> None:
        self.paths = local_files(str(path_or_url), cache_dir, storage_options)
        indexes = [FileIndex.read(path, keys) for path in self.paths]
        first = _check_same_keys(indexes, self.paths)
        self.keys, self.ragged = list(first.keys), first.ragged
        self.attrs = [index.attrs for index in indexes]
        self._ends = np.cumsum([index.length for index in indexes])
        self._handles: dict[int, h5py.File] = {}
        self._pid = os.getpid()
        self._memory = [_load_shared(p, self.keys, self.ragged) for p in self.paths] if share_memory else None

    def __len__(self) -> int:
        return int(self._ends[-1]) if self._ends.size else 0

    def __getitem__(self, i: int) -> dict[str, torch.Tensor]:
        f, local = self._locate(i)
        if self._memory is not None:
            return {k: _slice_shared(self._memory[f][k], local) for k in self.keys}
        handle = self._handle(f)
        return {k: torch.from_numpy(widened(_read(handle, k, local, k in self.ragged))) for k in self.keys}

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
            if not data_keys(handle):  # every row of its chunk was skipped
                return cls(0, (), frozenset(), frozenset(), _attrs(handle))
            wanted = keys or data_keys(handle)
            missing = [k for k in wanted if k not in handle]
            if missing:
                raise KeyError(f"{path} has no key(s) {missing}; available keys: {data_keys(handle)}")
            counts = {k: _count(handle, k) for k in wanted}
            attrs = _attrs(handle)
        if len({n for n, _ in counts.values()}) > 1:
            raise ValueError(f"{path}: keys hold different item counts {counts}; pass keys=[...] that belong together")
        ragged = frozenset(k for k in wanted if counts[k][1])
        length = next(iter(counts.values()))[0] if counts else 0
        return cls(length, tuple(wanted), ragged, frozenset(wanted) - ragged, attrs)


def _attrs(handle: h5py.File) -> dict:
    return {k: decode_attr(v) for k, v in handle.attrs.items()}


def _count(handle: h5py.File, key: str) -> tuple[int, bool]:
    """(items, is ragged) of one key."""
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


def _read(handle: h5py.File, key: str, i: int, ragged: bool) -> np.ndarray:
    if not ragged:
        return handle[key][i]
    start, stop = handle[key + OFFSETS_SUFFIX][i : i + 2]
    return handle[key][start:stop]


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
            values = torch.from_numpy(widened(handle[key][...])).share_memory_()
            offsets = torch.from_numpy(handle[key + OFFSETS_SUFFIX][...]).share_memory_() if key in ragged else None
            out[key] = (values, offsets)
        return out


def _slice_shared(stored: tuple[torch.Tensor, torch.Tensor | None], i: int) -> torch.Tensor:
    values, offsets = stored
    if offsets is None:
        return values[i]
    return values[int(offsets[i]) : int(offsets[i + 1])]


def local_files(url: str, cache_dir: str | None = None, storage_options: dict | None = None) -> list[str]:
    """The folder's (or the single file's) ``.h5`` files as local paths, downloading remote ones."""
    fs, path = url_to_fs(url, storage_options)
    if not fs.exists(path):
        raise FileNotFoundError(f"{url} does not exist")
    urls = fetch_files(url, ".h5", storage_options) if fs.isdir(path) else [url]
    urls = [u for u in urls if not u.rsplit("/", 1)[-1].startswith(".")]  # staging files of running writers
    if not urls:
        raise FileNotFoundError(f"no .h5 files in {url}; point H5Dataset at the cache stage's output folder")
    if is_local(fs):
        return [url_to_fs(u)[1] for u in urls]
    folder = os.path.join(_cache_root(cache_dir), hashlib.sha256(url.encode()).hexdigest()[:16])
    return [_download(fs, url_to_fs(u, storage_options)[1], folder) for u in urls]


def _cache_root(cache_dir: str | None) -> str:
    """``cache_dir``, else ``$H5PIPE_CACHE`` (downloads only), else the folder of h5pipe's other
    records (``$H5PIPE_CACHE_DIR``, ``$XDG_CACHE_HOME/h5pipe``, ``~/.cache/h5pipe``). Downloads
    need a folder even when ``H5PIPE_CACHE_DIR=none`` turns the records off: then the default."""
    return str(cache_dir or os.environ.get("H5PIPE_CACHE") or records.cache_dir() or records.default_cache_dir())


def _download(fs, remote: str, folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    local = os.path.join(folder, remote.rsplit("/", 1)[-1])
    if os.path.exists(local) and os.path.getsize(local) == fs.size(remote):
        return local
    tmp = f"{local}.part-{uuid.uuid4().hex[:8]}"
    try:
        fs.get_file(remote, tmp)
        os.replace(tmp, local)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return local
