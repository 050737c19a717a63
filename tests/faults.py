"""A fault-injecting fsspec filesystem for tests: ``flaky://`` over the local disk.

Uploads (``put_file``) of paths matching a pattern fail their first N attempts with a chosen
error, so retry behaviour is exercised through the real code path (local staging + put). Reads
can fail the same way, or wait at their open for a test's event (to show what runs before them).
"""

from __future__ import annotations

import threading
from collections import Counter

from fsspec import AbstractFileSystem, register_implementation
from fsspec.implementations.local import LocalFileSystem


class FlakyFileSystem(AbstractFileSystem):
    protocol = "flaky"
    root_marker = "/"
    cachable = False

    # class-level plan so every instance (threads, Prefect copies) shares it
    plan: dict[str, tuple[int, type[BaseException]]] = {}
    read_plan: dict[str, tuple[int, type[BaseException]]] = {}
    attempts: Counter = Counter()
    read_attempts: Counter = Counter()
    holds: dict[str, threading.Event] = {}
    _lock = threading.Lock()

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.local = LocalFileSystem()

    @classmethod
    def fail(cls, suffix: str, times: int, error: type[BaseException]) -> None:
        cls.plan[suffix] = (times, error)

    @classmethod
    def fail_reads(cls, suffix: str, times: int, error: type[BaseException]) -> None:
        """Opening a matching path for reading fails its first ``times`` attempts."""
        cls.read_plan[suffix] = (times, error)

    @classmethod
    def hold_reads(cls, suffix: str, gate: threading.Event) -> None:
        """Opening a matching path for reading waits until ``gate`` is set (RuntimeError after 10 s)."""
        cls.holds[suffix] = gate

    @classmethod
    def reset(cls) -> None:
        cls.holds.clear()
        cls.plan.clear()
        cls.attempts.clear()
        cls.read_plan.clear()
        cls.read_attempts.clear()

    @classmethod
    def _strip_protocol(cls, path):
        path = path[len("flaky://") :] if path.startswith("flaky://") else path
        return LocalFileSystem._strip_protocol(path)

    @classmethod
    def _maybe_fail(cls, plan: dict, attempts: Counter, path: str, verb: str) -> None:
        """Raise the planned error while ``path`` has failed fewer times than planned."""
        with cls._lock:
            for suffix, (times, error) in plan.items():
                if path.endswith(suffix):
                    attempts[path] += 1
                    if attempts[path] <= times:
                        raise error(f"injected failure {attempts[path]}/{times} {verb} {path}")

    def put_file(self, lpath, rpath, **kwargs):
        rpath = self._strip_protocol(rpath)
        self._maybe_fail(self.plan, self.attempts, rpath, "writing")
        self.local.makedirs(self.local._parent(rpath), exist_ok=True)
        self.local.put_file(lpath, rpath)

    def _open(self, path, mode="rb", **kwargs):
        path = self._strip_protocol(path)
        if "r" in mode:
            self._wait_if_held(path)
            self._maybe_fail(self.read_plan, self.read_attempts, path, "reading")
        return self.local._open(path, mode, **kwargs)

    @classmethod
    def _wait_if_held(cls, path: str) -> None:
        for suffix, gate in list(cls.holds.items()):
            if path.endswith(suffix) and not gate.wait(10):
                raise RuntimeError(f"{path} was held and never released: the test waited for it first")

    def ls(self, path, detail=True, **kwargs):
        return self.local.ls(self._strip_protocol(path), detail=detail, **kwargs)

    def info(self, path, **kwargs):
        return self.local.info(self._strip_protocol(path), **kwargs)

    def makedirs(self, path, exist_ok=False):
        return self.local.makedirs(self._strip_protocol(path), exist_ok=exist_ok)

    def mkdir(self, path, create_parents=True, **kwargs):
        return self.local.mkdir(self._strip_protocol(path), create_parents=create_parents, **kwargs)

    def rm_file(self, path):
        return self.local.rm_file(self._strip_protocol(path))

    def _rm(self, path):
        return self.local.rm_file(self._strip_protocol(path))

    def rm(self, path, recursive=False, maxdepth=None):
        return self.local.rm(self._strip_protocol(path), recursive=recursive, maxdepth=maxdepth)


register_implementation("flaky", FlakyFileSystem, clobber=True)
