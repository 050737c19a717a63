"""Remote data files (s3://, memory://, ...) for sized loading: copied once to local disk, then
read like local files.

Why not let ``datasets`` download them: it refuses every non-local URL when ``HF_HUB_OFFLINE`` is
set (common on clusters that must not reach the hub, but do reach S3). The copy lives under the
datasets cache, keyed by the URL and what the file system reports about the file (ETag, size,
mtime), so later opens and parallel chunk tasks on the same machine reuse it, and the Arrow cache
built from it hits too. It is written to a temporary name and renamed, so a reader never sees a
partial copy. Streaming reads remote files directly and copies nothing.
"""

from __future__ import annotations

import os
import posixpath
import uuid
from collections.abc import Sequence
from pathlib import Path

from pipeline_core.sources.fingerprint import digest
from pipeline_core.storage.fs import url_to_fs

IDENTITY_KEYS = ("ETag", "etag", "size", "mtime", "LastModified", "last_modified", "created", "md5Hash")


def is_remote(url: str) -> bool:
    return "://" in url and not url.startswith("file://")


def local_copies(files: Sequence[str], storage_options: dict | None = None) -> list[str]:
    """Local paths holding ``files``: local files as they are, remote ones copied (once)."""
    return [local_copy(f, storage_options) if is_remote(f) else f for f in files]


def local_copy(url: str, storage_options: dict | None = None) -> str:
    fs, path = url_to_fs(url, storage_options)
    info = fs.info(path)
    key = digest(url, {k: str(info[k]) for k in IDENTITY_KEYS if k in info})[:24]
    target = copies_root() / key / posixpath.basename(path)
    if not target.exists():
        target.parent.mkdir(parents=True, exist_ok=True)
        tmp = target.with_name(f".{target.name}.tmp-{uuid.uuid4().hex[:8]}")
        try:
            fs.get_file(path, str(tmp))
            os.replace(tmp, target)
        finally:
            tmp.unlink(missing_ok=True)
    return str(target)


def copies_root() -> Path:
    import datasets

    return Path(datasets.config.HF_DATASETS_CACHE) / "h5pipe_remote"
