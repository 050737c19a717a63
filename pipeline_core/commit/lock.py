"""One writer per output folder: ``h5pipe.lock``, taken atomically before the settings check.

Two runs with different settings into one folder would each pass the settings check and then
overwrite each other's files; two with the same settings would race on the manifest. So every
stage run holds the folder's lock from before it reads the manifest until after its final commit.

- **Taking it** is one atomic create that fails when the lock exists: ``O_CREAT | O_EXCL`` on a
  local disk, a ``PutObject`` with ``If-None-Match: *`` on S3 (a conditional write, which S3 and
  moto honour). The lock's body names its holder: host, pid, start time and a random token.
- **Heartbeat**: the holder rewrites its lock every ``heartbeat`` seconds (local: the mtime;
  S3: the object, with ``If-Match`` on its ETag), so a live holder's lock never looks old.
- **Stale locks** are broken: a holder on this host whose pid is gone (or reused), or any holder
  whose heartbeat is older than ``stale_after``. Breaking is a compare-and-swap, so two runs
  breaking one stale lock cannot both win: S3 overwrites with ``If-Match`` on the stale ETag;
  locally the stale file is renamed aside, and put back if it turns out to be someone else's
  fresh lock.
- A run that cannot take the lock waits up to ``timeout`` seconds, then fails with
  ``FolderLocked`` naming the holder.
"""

from __future__ import annotations

import contextlib
import json
import os
import threading
import time
import uuid
from dataclasses import asdict, dataclass
from datetime import datetime

from pipeline_core.storage.fs import host_id, is_local, join_url, url_to_fs

LOCK = "h5pipe.lock"
HEARTBEAT = 10.0  # seconds between heartbeats
STALE_AFTER = 300.0  # seconds without a heartbeat before a holder on another host counts as gone
POLL = 0.5


class FolderLocked(RuntimeError):
    """Another run holds the output folder's lock (the message names it)."""


@dataclass(frozen=True, slots=True)
class Holder:
    host: str
    pid: int
    started: float
    token: str
    hostname: str = ""

    def describe(self) -> str:
        when = datetime.fromtimestamp(self.started).isoformat(timespec="seconds")
        return f"pid {self.pid} on {self.hostname or self.host} (since {when})"

    def to_json(self) -> bytes:
        return json.dumps(asdict(self), sort_keys=True).encode()

    @classmethod
    def from_json(cls, data: bytes) -> Holder | None:
        try:
            return cls(**json.loads(data))
        except (ValueError, TypeError):
            return None  # torn or foreign: judged by its age alone

    @classmethod
    def me(cls) -> Holder:
        import socket

        return cls(host_id(), os.getpid(), time.time(), uuid.uuid4().hex, socket.gethostname())


@dataclass(frozen=True, slots=True)
class Seen:
    """A lock as read: its body, what a compare-and-swap needs (``version``), its last heartbeat."""

    body: bytes
    version: str
    heartbeat: float


class FolderLock:
    """``with FolderLock(folder, storage_options):`` the run that holds the folder."""

    def __init__(
        self,
        folder: str,
        storage_options: dict | None = None,
        timeout: float = 0.0,
        stale_after: float = STALE_AFTER,
        heartbeat: float = HEARTBEAT,
    ) -> None:
        self.url = join_url(folder, LOCK)
        self.store = _store(self.url, storage_options)
        self.timeout, self.stale_after, self.heartbeat = timeout, stale_after, heartbeat
        self.holder = Holder.me()
        self._stop = threading.Event()
        self._beating: threading.Thread | None = None

    def __enter__(self) -> FolderLock:
        self.acquire()
        return self

    def __exit__(self, *exc) -> None:
        self.release()

    def acquire(self) -> None:
        deadline = time.monotonic() + self.timeout
        body = self.holder.to_json()
        while not self.store.create(body):
            seen = self.store.read()
            if seen is not None and self._stale(seen) and self.store.swap(seen, body):
                break
            if time.monotonic() >= deadline:
                raise FolderLocked(self._refusal(seen))
            time.sleep(POLL)
        self._beating = threading.Thread(target=self._beat, name="h5pipe-lock-heartbeat", daemon=True)
        self._beating.start()

    def release(self) -> None:
        self._stop.set()
        if self._beating is not None:
            self._beating.join()
        self.store.delete_if(self.holder.to_json())

    def _beat(self) -> None:
        while not self._stop.wait(self.heartbeat):
            with contextlib.suppress(OSError):
                self.store.touch(self.holder.to_json())

    def _stale(self, seen: Seen) -> bool:
        holder = Holder.from_json(seen.body)
        if holder is not None and holder.host == host_id():
            from pipeline_core.commit.sweep import writer_alive

            return not writer_alive(holder.pid, holder.started)
        return time.time() - seen.heartbeat > self.stale_after

    def _refusal(self, seen: Seen | None) -> str:
        holder = Holder.from_json(seen.body) if seen else None
        who = holder.describe() if holder else "another run"
        return (
            f"{self.url.rsplit('/', 1)[0]} is being written by {who}, which holds {LOCK}; one run writes a "
            "folder at a time: wait for it, write to another folder, or, if that run is gone and its lock "
            f"remains (another machine), delete {self.url}"
        )


class LocalLockStore:
    def __init__(self, path: str) -> None:
        self.path = path

    def create(self, body: bytes) -> bool:
        os.makedirs(os.path.dirname(self.path) or ".", exist_ok=True)
        try:
            fd = os.open(self.path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
        except FileExistsError:
            return False
        with os.fdopen(fd, "wb") as f:
            f.write(body)
            f.flush()
            os.fsync(f.fileno())
        return True

    def read(self) -> Seen | None:
        try:
            with open(self.path, "rb") as f:
                body = f.read()
                heartbeat = os.fstat(f.fileno()).st_mtime
        except FileNotFoundError:
            return None
        return Seen(body, body.hex(), heartbeat)

    def swap(self, seen: Seen, body: bytes) -> bool:
        """Replace the lock ``seen`` with ``body``; False when it changed meanwhile."""
        aside = f"{self.path}.breaking-{uuid.uuid4().hex[:8]}"
        try:
            os.rename(self.path, aside)
        except FileNotFoundError:
            return self.create(body)
        with open(aside, "rb") as f:
            taken = f.read()
        if taken != seen.body:  # a fresh lock, not the stale one: put it back
            with contextlib.suppress(FileExistsError):
                os.link(aside, self.path)
            os.unlink(aside)
            return False
        os.unlink(aside)
        return self.create(body)

    def touch(self, body: bytes) -> None:
        seen = self.read()
        if seen is not None and seen.body == body:
            os.utime(self.path)

    def delete_if(self, body: bytes) -> None:
        seen = self.read()
        if seen is not None and seen.body == body:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(self.path)


class S3LockStore:
    """Conditional writes: ``If-None-Match: *`` to create, ``If-Match: <ETag>`` to swap and delete."""

    def __init__(self, fs, path: str) -> None:
        self.fs = fs
        self.bucket, _, self.key = path.partition("/")

    def create(self, body: bytes) -> bool:
        return self._put(body, IfNoneMatch="*")

    def read(self) -> Seen | None:
        """Body and ETag from one GET, so a swap judges exactly the version it read."""
        from fsspec.asyn import sync

        async def get() -> Seen | None:
            try:
                got = await self.fs._call_s3("get_object", Bucket=self.bucket, Key=self.key)
            except FileNotFoundError:
                return None
            async with got["Body"] as stream:
                data = await stream.read()
            return Seen(data, got["ETag"], got["LastModified"].timestamp())

        return sync(self.fs.loop, get)

    def swap(self, seen: Seen, body: bytes) -> bool:
        return self._put(body, IfMatch=seen.version)

    def touch(self, body: bytes) -> None:
        seen = self.read()
        if seen is not None and seen.body == body:
            self._put(body, IfMatch=seen.version)

    def delete_if(self, body: bytes) -> None:
        seen = self.read()
        if seen is None or seen.body != body:
            return
        with contextlib.suppress(FileNotFoundError):
            try:
                self.fs.call_s3("delete_object", Bucket=self.bucket, Key=self.key, IfMatch=seen.version)
            except OSError as e:
                if not _precondition_failed(e):
                    raise

    def _put(self, body: bytes, **condition) -> bool:
        try:
            self.fs.call_s3("put_object", Bucket=self.bucket, Key=self.key, Body=body, **condition)
        except OSError as e:
            if _precondition_failed(e):
                return False
            raise
        return True


def _precondition_failed(error: OSError) -> bool:
    cause = error.__cause__ or error.__context__
    code = getattr(cause, "response", {}).get("Error", {}).get("Code", "")
    return code in ("PreconditionFailed", "ConditionalRequestConflict") or "pre-condition" in str(error)


def _store(url: str, storage_options: dict | None):
    fs, path = url_to_fs(url, storage_options)
    if is_local(fs):
        return LocalLockStore(path)
    if "s3" in (fs.protocol if isinstance(fs.protocol, (tuple, list)) else (fs.protocol,)):
        return S3LockStore(fs, path)
    return NoLockStore()


class NoLockStore:
    """Stores without an atomic create (memory://, test file systems): no lock, as before."""

    def create(self, body: bytes) -> bool:
        return True

    def read(self) -> Seen | None:
        return None

    def swap(self, seen: Seen, body: bytes) -> bool:
        return True

    def touch(self, body: bytes) -> None:
        pass

    def delete_if(self, body: bytes) -> None:
        pass
