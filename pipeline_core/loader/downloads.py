"""The local paths of a folder's (or a file's) ``.h5`` files, as H5Dataset reads them.

A local folder gives the files its manifest commits (docs/commit-protocol.md). A remote folder
(any fsspec URL) is downloaded once into ``cache_dir`` (default ``$H5PIPE_CACHE``, else
``$H5PIPE_CACHE_DIR`` or ``~/.cache/h5pipe``, see ``_cache_root``); a cached file is reused while
it is the same file: the manifest's sha256, else the ETag (never the size alone).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid

from pipeline_core.commit.manifest import committed_outputs, load_manifest
from pipeline_core.commit.stamps import file_infos, stamp_of
from pipeline_core.storage import records
from pipeline_core.storage.fs import fetch_files, is_local, url_to_fs


def local_files(url: str, cache_dir: str | None = None, storage_options: dict | None = None) -> list[str]:
    """The folder's (or the single file's) ``.h5`` files as local paths, downloading remote ones."""
    fs, path = url_to_fs(url, storage_options)
    if not fs.exists(path):
        raise FileNotFoundError(f"{url} does not exist")
    urls = _folder_files(url, storage_options) if fs.isdir(path) else [url]
    if not urls:
        raise FileNotFoundError(f"no .h5 files in {url}; point H5Dataset at the cache stage's output folder")
    if is_local(fs):
        return [url_to_fs(u)[1] for u in urls]
    folder = os.path.join(_cache_root(cache_dir), hashlib.sha256(url.encode()).hexdigest()[:16])
    identity = _identities(url if fs.isdir(path) else None, urls, storage_options)
    return [_download(fs, url_to_fs(u, storage_options)[1], folder, identity[u]) for u in urls]


def _folder_files(url: str, storage_options: dict | None) -> list[str]:
    """The ``.h5`` files the folder's manifest commits (never a stray or stale file beside them);
    without a manifest, every ``.h5`` but hidden names (staging files of running writers)."""
    listed = fetch_files(url, ".h5", storage_options)
    committed = committed_outputs(url, ".h5", storage_options)
    if committed is None:
        return [u for u in listed if not u.rsplit("/", 1)[-1].startswith(".")]
    by_name = {u.rsplit("/", 1)[-1]: u for u in listed}
    missing = [n for n in committed if n not in by_name]
    if missing:
        raise FileNotFoundError(f"{url}: its manifest commits {missing[:3]} but they are gone; rerun the cache stage")
    return [by_name[n] for n in committed]


def _cache_root(cache_dir: str | None) -> str:
    """``cache_dir``, else ``$H5PIPE_CACHE`` (downloads only), else the folder of h5pipe's other
    records (``$H5PIPE_CACHE_DIR``, ``$XDG_CACHE_HOME/h5pipe``, ``~/.cache/h5pipe``). Downloads
    need a folder even when ``H5PIPE_CACHE_DIR=none`` turns the records off: then the default."""
    return str(cache_dir or os.environ.get("H5PIPE_CACHE") or records.cache_dir() or records.default_cache_dir())


def _download(fs, remote: str, folder: str, identity: str | None) -> str:
    """The local copy of ``remote``, fetched again unless the copy was made from the same file:
    ``identity`` (the manifest's sha256, else the store's stamp: ETag and size) is recorded beside
    it. Size alone is never enough: HDF5 sizes fall on a few values."""
    os.makedirs(folder, exist_ok=True)
    local = os.path.join(folder, remote.rsplit("/", 1)[-1])
    marker = os.path.join(folder, f".{os.path.basename(local)}.source")
    if identity is not None and os.path.exists(local) and _read_marker(marker) == identity:
        return local
    tmp = f"{local}.part-{uuid.uuid4().hex[:8]}"
    try:
        fs.get_file(remote, tmp)
        os.replace(tmp, local)
        if identity is None:  # nothing names this content: the copy is never reused
            with contextlib.suppress(FileNotFoundError):
                os.unlink(marker)
        else:
            with open(marker, "w", encoding="utf-8") as f:
                f.write(identity)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    return local


def _read_marker(path: str) -> str | None:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except FileNotFoundError:
        return None


def _identities(folder: str | None, urls: list[str], storage_options: dict | None) -> dict[str, str | None]:
    """What names each remote file's content: ``sha256:`` from the folder's manifest when it lists
    the file, else the store's stamp (ETag and size; one listing per folder), else None (a store
    that gives neither, e.g. some HTTP servers: the file is fetched every time)."""
    manifest = load_manifest(folder, storage_options) if folder else None
    listed = manifest.entries if manifest else {}
    infos = file_infos([u for u in urls if u.rsplit("/", 1)[-1] not in listed], storage_options)
    found: dict[str, str | None] = {}
    for u in urls:
        entry = listed.get(u.rsplit("/", 1)[-1])
        stamp = None if entry else stamp_of(infos.get(u) or {})
        found[u] = f"sha256:{entry.sha256}:{entry.size}" if entry else (f"stamp:{stamp}" if stamp else None)
    return found
