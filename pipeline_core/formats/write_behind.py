"""WriteBehind: a writer's writes run in one thread of their own, in order, a bounded number waiting.

h5py releases the GIL while HDF5 writes, so the caller prepares and encodes the next batches
meanwhile: the pt stage's main thread spent about half its time in HDF5 writes (py-spy,
docs/performance.md). ``H5Writer`` hands each append to a chunked dataset to one of these.
"""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

WRITES_AHEAD = 2  # batches' writes waiting for the writer thread (memory: their arrays)


class WriteBehind:
    """Runs writes in one thread of its own, in the order given, at most ``depth`` waiting
    (``submit`` blocks beyond that). A write's error is raised by the next ``submit`` or by
    ``wait``, once; ``wait`` returns only when no write runs, so the file can be closed after it,
    raised or not. The arrays handed over must not change afterwards (H5Writer's buffered
    datasets already keep references to them)."""

    def __init__(self, depth: int = WRITES_AHEAD, name: str = "h5pipe-h5-write") -> None:
        self._pool = ThreadPoolExecutor(1, thread_name_prefix=name)
        self._slots = threading.Semaphore(depth)
        self._pending: deque[Future] = deque()

    def submit(self, write: Callable, *args) -> None:
        while self._pending and self._pending[0].done():
            if self._pending[0].exception() is not None:
                self.wait()  # raises it, after the writes behind it are done
            self._pending.popleft()
        self._slots.acquire()
        future = self._pool.submit(write, *args)
        future.add_done_callback(lambda _: self._slots.release())
        self._pending.append(future)

    def wait(self) -> None:
        """Every submitted write done; then the first error among them, if any, is raised."""
        error = None
        while self._pending:
            failed = self._pending.popleft().exception()  # waits for that write
            error = error or failed
        if error is not None:
            raise error

    def shutdown(self) -> None:
        self._pending.clear()
        self._pool.shutdown(wait=True)
