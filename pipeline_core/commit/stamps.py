"""File stamps: a cheap sign that a file has not changed since it was last hashed.

A stamp is the file's size plus what its store changes on every write: the ETag on S3 (derived
from the content), the modification time, inode and ``st_ctime_ns`` on a local disk (the change time,
which no user can set back, catches an edit whose mtime was restored). Equal stamps mean the file
was not rewritten, so a rerun may trust the sha256 it recorded with the stamp instead of
reading the bytes again (as make, rsync and git's index do). A store that reports neither gives
no stamp (None), and such files are always hashed.

Stamps are read from one listing per folder, so stamping a thousand chunks on S3 is a handful of
LIST calls, not a thousand HEADs.
"""

from __future__ import annotations

import os
from collections import defaultdict

from pipeline_core.storage.fs import is_local, url_to_fs

# Keys fsspec stores use for "this changes when the file is rewritten", in order of preference.
_CHANGE_KEYS = ("ETag", "etag", "md5Hash", "generation", "mtime", "LastModified", "last_modified", "updated")


def stamp_of(info: dict) -> str | None:
    """The stamp of one fsspec ``info``/``ls(detail=True)`` entry, or None if the store gives none."""
    if info.get("type") != "file" or info.get("size") is None:
        return None
    changes = [f"{k}={info[k]}" for k in _CHANGE_KEYS if info.get(k) not in (None, "")]
    if not changes:
        return None
    inode = f":ino={info['ino']}" if info.get("ino") is not None else ""
    ctime = f":ctime={info['ctime_ns']}" if info.get("ctime_ns") is not None else ""
    return f"size={info['size']}:{changes[0]}{inode}{ctime}"


def stamps(urls: list[str], storage_options: dict | None = None) -> dict[str, str | None]:
    """Stamp of every URL (None when missing or unstampable), from one listing per parent folder."""
    return {url: (stamp_of(info) if info else None) for url, info in file_infos(urls, storage_options).items()}


def stamp_now(url: str, storage_options: dict | None = None) -> str | None:
    """The stamp of one file read now from its store (one HEAD or stat, no listing; None when missing)."""
    fs, path = url_to_fs(url, storage_options)
    fs.invalidate_cache(path)
    try:
        info = fs.info(path)
    except FileNotFoundError:
        return None
    return stamp_of(_with_ctime(info) if is_local(fs) else info)


def file_infos(urls: list[str], storage_options: dict | None = None) -> dict[str, dict | None]:
    """fsspec info of every URL (None when missing), from one listing per parent folder."""
    by_folder: dict[str, list[str]] = defaultdict(list)
    for url in urls:
        by_folder[url.rsplit("/", 1)[0] if "/" in url else "."].append(url)
    found: dict[str, dict | None] = {}
    for folder, members in by_folder.items():
        listed = _listing(folder, storage_options)
        for url in members:
            found[url] = listed.get(url_to_fs(url, storage_options)[1])
    return found


def _listing(folder: str, storage_options: dict | None) -> dict[str, dict]:
    fs, root = url_to_fs(folder, storage_options)
    fs.invalidate_cache(root)  # a listing cached earlier in this process may predate a rewrite
    try:
        entries = fs.ls(root, detail=True)
    except FileNotFoundError:
        return {}
    if is_local(fs):
        entries = [_with_ctime(e) for e in entries]
    # ls names are store paths ("bucket/key", "/abs/path"): the form url_to_fs gives for a URL
    return {e["name"]: e for e in entries}


def _with_ctime(info: dict) -> dict:
    """A local entry plus ``st_ctime_ns``: every write or ``utime`` moves it, and no user can set it
    back, so a byte change with a restored mtime still changes the stamp."""
    try:
        return {**info, "ctime_ns": os.stat(info["name"]).st_ctime_ns}
    except FileNotFoundError:
        return info
