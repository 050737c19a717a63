"""The local paths of a folder's (or a file's) ``.h5`` files, as H5Dataset reads them.

A local folder gives the files its manifest commits (docs/commit-protocol.md). A remote folder
(any fsspec URL) is downloaded once into ``cache_dir`` (default ``$H5PIPE_CACHE``, else
``$H5PIPE_CACHE_DIR`` or ``~/.cache/h5pipe``, see ``_cache_root``); a cached file is reused while
it is the same file: the manifest's sha256, else the ETag (never the size alone), checked on the
bytes fetched (``_download``).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import uuid

from pipeline_core.commit.manifest import Manifest, committed_manifest
from pipeline_core.commit.stamps import file_infos, stamp_of
from pipeline_core.storage import records
from pipeline_core.storage.fs import fetch_files, is_local, url_to_fs
from pipeline_core.storage.hashing import file_digest


def local_files(url: str, cache_dir: str | None = None, storage_options: dict | None = None) -> list[str]:
    """The folder's (or the single file's) ``.h5`` files as local paths, downloading remote ones."""
    fs, path = url_to_fs(url, storage_options)
    if not fs.exists(path):
        raise FileNotFoundError(f"{url} does not exist")
    manifest = committed_manifest(url, storage_options) if fs.isdir(path) else None  # read once: see _identities
    urls = _folder_files(url, manifest, storage_options) if fs.isdir(path) else [url]
    if not urls:
        raise FileNotFoundError(f"no .h5 files in {url}; point H5Dataset at the cache stage's output folder")
    if is_local(fs):
        return [url_to_fs(u)[1] for u in urls]
    folder = os.path.join(_cache_root(cache_dir), hashlib.sha256(url.encode()).hexdigest()[:16])
    identity = _identities(manifest, urls, storage_options)
    return [_download(fs, u, folder, identity[u], storage_options) for u in urls]


def _folder_files(url: str, manifest: Manifest | None, storage_options: dict | None) -> list[str]:
    """The ``.h5`` files the folder's manifest commits (never a stray or stale file beside them);
    without a manifest, every ``.h5`` but hidden names (staging files of running writers)."""
    listed = fetch_files(url, ".h5", storage_options)
    if manifest is None:
        return [u for u in listed if not u.rsplit("/", 1)[-1].startswith(".")]
    committed = manifest.outputs(".h5")
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


def _download(fs, url: str, folder: str, identity: str | None, storage_options: dict | None = None) -> str:
    """The local copy of the file at ``url``, fetched unless a copy of the same file is there. ``identity``
    (the manifest's sha256 and size, else the store's stamp: ETag and size) names the copy, so a
    copy is reused only for the same content (size alone is never enough: HDF5 sizes fall on a few
    values), and a copy another dataset indexed is never overwritten by a newer file of the same
    name: that one gets its own copy, and the older copies of the name are removed, so a reader
    still on one fails loudly instead of reading the newer file under its old index."""
    os.makedirs(folder, exist_ok=True)
    remote = url_to_fs(url, storage_options)[1]
    name = remote.rsplit("/", 1)[-1]
    local = os.path.join(folder, f"{_tag(identity)}-{name}" if identity else name)
    if identity is not None and os.path.exists(local):
        return local
    tmp = f"{local}.part-{uuid.uuid4().hex[:8]}"
    try:
        fs.get_file(remote, tmp)
        _check_fetched(url, tmp, identity, storage_options)
        os.replace(tmp, local)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
    if identity is not None:
        _drop_other_copies(folder, name, local)
    return local


def _tag(identity: str) -> str:
    return hashlib.sha256(identity.encode()).hexdigest()[:16]


def _check_fetched(remote: str, local: str, identity: str | None, storage_options: dict | None) -> None:
    """The fetched bytes are the file ``identity`` names, else FileChangedError: a manifest written
    before its file was replaced (a folder being synced), or a file rewritten while it was read."""
    if identity is None:
        return
    if identity.startswith("sha256:"):
        digest = file_digest(local)
        found = f"sha256:{digest.sha256}:{digest.size}"
    else:
        found = f"stamp:{stamp_of(file_infos([remote], storage_options).get(remote) or {})}"
    if found != identity:
        raise FileChangedError(
            f"{remote} is not the file its folder names ({identity[:40]}..., read {found[:40]}...): it is "
            "being rewritten or synced; read the folder again once its run is committed"
        )


def _drop_other_copies(folder: str, name: str, keep: str) -> None:
    """Remove the copies of ``name`` made from other content (and the pre-2026-12-07 layout's copy
    and marker), so a reader indexed on one of them fails loudly rather than read other bytes."""
    for entry in os.listdir(folder):
        other = (
            entry == name or entry == f".{name}.source" or (entry.endswith(f"-{name}") and len(entry) == len(name) + 17)
        )
        if other and os.path.join(folder, entry) != keep:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(os.path.join(folder, entry))


class FileChangedError(RuntimeError):
    """A remote file's bytes are not those its folder named when the read began."""


def _identities(manifest: Manifest | None, urls: list[str], storage_options: dict | None) -> dict[str, str | None]:
    """What names each remote file's content: ``sha256:`` from the folder's manifest when it lists
    the file, else the store's stamp (ETag and size; one listing per folder), else None (a store
    that gives neither, e.g. some HTTP servers: the file is fetched every time). The manifest is the
    one the file names came from: a second read could be another run's, naming the new bytes under
    the old run's set of files."""
    listed = manifest.entries if manifest else {}
    infos = file_infos([u for u in urls if u.rsplit("/", 1)[-1] not in listed], storage_options)
    found: dict[str, str | None] = {}
    for u in urls:
        entry = listed.get(u.rsplit("/", 1)[-1])
        stamp = None if entry else stamp_of(infos.get(u) or {})
        found[u] = f"sha256:{entry.sha256}:{entry.size}" if entry else (f"stamp:{stamp}" if stamp else None)
    return found
