"""Sweeping the temporary files of writers that are gone.

Outputs are staged beside their final name as ``.{name}.tmp-{host}-{pid}-{random}{suffix}`` (see
``fs.staging_tag``) and renamed when complete, so a killed writer leaves its temp behind. A temp is
*stale*, and removed, when:

- it names this host and its pid is not running, is a zombie, or runs a process started after the
  temp was last written (the pid was reused), or
- its writer cannot be checked (another host, or a name without host and pid, like the Megatron
  staging folders of older versions, ``.{stem}.megatron-tmp-{random}``; today's carry the tag:
  ``.{stem}.megatron-tmp-{host}-{pid}-{random}``) and nothing in it changed for ``max_age`` seconds.

A live writer's temp is never removed: its pid runs a process that started before the temp's last
write. (One blind spot: two containers with the same host name and separate pid namespaces sharing
one folder; give them distinct host names.)

Remote output folders hold no temps (remote outputs are staged locally and uploaded whole); the
local staging files of remote uploads are swept by ``sweep_local_staging``.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import tempfile
import time
from dataclasses import dataclass

import psutil

from pipeline_core.storage.fs import host_id, is_local, url_to_fs

DEFAULT_MAX_AGE = 24 * 3600.0  # seconds without a write before an unidentifiable temp counts as abandoned
PID_REUSE_SLACK = 2.0  # seconds; process start times are coarse, and erring here only keeps a temp
TAGGED = re.compile(r"tmp-(?P<host>[0-9a-f]{8})-(?P<pid>\d+)-[0-9a-f]{8}")
UNTAGGED = re.compile(r"\.(?:megatron-)?tmp-[0-9a-f]{8}(?:\.|$)")
LOCAL_STAGING_PREFIX = "h5pipe-tmp-"


@dataclass(frozen=True, slots=True)
class TempFile:
    """A temporary file (or Megatron staging folder) and the writer its name records."""

    path: str
    host: str | None  # None: the name does not say (age decides)
    pid: int | None
    last_write: float  # newest mtime of the file, or of the folder and everything in it

    @property
    def name(self) -> str:
        return os.path.basename(self.path)


def is_temp_name(name: str) -> bool:
    """True for the names h5pipe writers stage under (never a published output's name)."""
    return name.startswith((".", LOCAL_STAGING_PREFIX)) and bool(TAGGED.search(name) or UNTAGGED.search(name))


def parse_temp(path: str) -> TempFile | None:
    """The TempFile at ``path`` when its name is an h5pipe temporary name, else None."""
    name = os.path.basename(path)
    if not is_temp_name(name):
        return None
    tagged = TAGGED.search(name)
    host, pid = (tagged["host"], int(tagged["pid"])) if tagged else (None, None)
    return TempFile(path, host, pid, _last_write(path))


def writer_alive(pid: int, last_write: float) -> bool:
    """True when ``pid`` runs a process that could have written at ``last_write`` (a reused pid cannot)."""
    try:
        process = psutil.Process(pid)
        if process.status() == psutil.STATUS_ZOMBIE:
            return False
        return process.create_time() <= last_write + PID_REUSE_SLACK
    except psutil.NoSuchProcess:
        return False
    except psutil.AccessDenied:
        return True  # another user's process: assume it is the writer


def is_stale(temp: TempFile, max_age: float = DEFAULT_MAX_AGE, now: float | None = None) -> bool:
    if temp.host == host_id() and temp.pid is not None:
        return not writer_alive(temp.pid, temp.last_write)
    return (now if now is not None else time.time()) - temp.last_write > max_age


def stale_temps(folder: str, storage_options: dict | None = None, max_age: float = DEFAULT_MAX_AGE) -> list[TempFile]:
    """The stale temps directly inside a local ``folder``; none for remote folders."""
    fs, root = url_to_fs(folder, storage_options)
    if not is_local(fs) or not os.path.isdir(root):
        return []
    now = time.time()
    found = (parse_temp(os.path.join(root, name)) for name in sorted(os.listdir(root)))
    return [t for t in found if t is not None and is_stale(t, max_age, now)]


def sweep_stale_temps(
    output_dir: str, storage_options: dict | None = None, max_age: float = DEFAULT_MAX_AGE
) -> list[str]:
    """Remove the temps of gone writers from ``output_dir``; the paths removed. Safe while other
    writers run: call it at the start of every stage that writes into ``output_dir``."""
    return [t.path for t in stale_temps(output_dir, storage_options, max_age) if _remove(t.path)]


def sweep_local_staging(max_age: float = DEFAULT_MAX_AGE, folder: str | None = None) -> list[str]:
    """Remove the local staging files of remote uploads whose writer is gone (``$TMPDIR/h5pipe-tmp-*``)."""
    root = folder or tempfile.gettempdir()
    now = time.time()
    found = (parse_temp(os.path.join(root, n)) for n in sorted(os.listdir(root)) if n.startswith(LOCAL_STAGING_PREFIX))
    return [t.path for t in found if t is not None and is_stale(t, max_age, now) and _remove(t.path)]


def _last_write(path: str) -> float:
    """mtime of a file; for a folder the newest mtime inside it (a live writer appends to its files)."""
    try:
        newest = os.lstat(path).st_mtime
        for folder, _, names in os.walk(path):
            for name in names:
                with contextlib.suppress(FileNotFoundError):
                    newest = max(newest, os.stat(os.path.join(folder, name)).st_mtime)
    except FileNotFoundError:  # gone meanwhile (published or swept by someone else)
        return time.time()
    return newest


def _remove(path: str) -> bool:
    """Remove a file or folder; False when it was already gone (another sweeper, or a publish)."""
    try:
        if os.path.isdir(path) and not os.path.islink(path):
            shutil.rmtree(path)
        else:
            os.remove(path)
    except FileNotFoundError:
        return False
    return True
