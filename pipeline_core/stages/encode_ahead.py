"""Encode ahead: the next batches are processed in worker threads while the caller writes this one.

gigatoken releases the GIL while it encodes, and two calls in flight keep two cores busier than
one. Measured on 400 MB of the bench corpus, texts in memory, GPT-2, 2 cores: one caller
2.19-2.75 s (1.3 cores busy), two threads 1.45-1.53 s (1.8), the same ids; which part of a single
call leaves a core idle was not isolated.

``EncodeAhead(process, batches, width)`` yields ``(batch, process(batch))`` in the order of
``batches``; ``width`` calls run in threads (on the batches after the one the consumer holds) while
the consumer works on a result. A call's exception is raised in the consumer
at its place in that order, after the results before it. Leaving the ``with`` block early
cancels the calls not started and waits for the running ones, so no worker outlives the block.
Memory: ``width`` batches in processing beside the one the consumer holds (with ``width=1``
nothing runs ahead: each batch is processed in the consumer's thread). On the pt stage, 400 MB,
pack 2048, 2 cores, peak RSS rose from ~280 to ~370-400 MiB with ``width=2``, in 10 MB chunks
and in one 420 MB chunk alike: the batches in flight and the encoder threads' own malloc arenas,
not growing with the chunk. ``H5PIPE_ENCODE_AHEAD=1`` gives that memory back for the speed.
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from pipeline_core.errors import ConfigError

WIDTH_ENV = "H5PIPE_ENCODE_AHEAD"  # batches encoded at once by the cache stage; 1: one at a time
DEFAULT_WIDTH = 2
T = TypeVar("T")
R = TypeVar("R")


class EncodeAhead(Generic[T, R]):
    """``with EncodeAhead(process, batches, width) as done: for batch, result in done: ...``."""

    def __init__(self, process: Callable[[T], R], batches: Iterable[T], width: int = DEFAULT_WIDTH) -> None:
        if width < 1:
            raise ValueError(f"width must be at least 1, got {width}")
        self._process, self._batches, self._width = process, batches, width
        self._pool = ThreadPoolExecutor(width, thread_name_prefix="h5pipe-encode") if width > 1 else None
        self._pending: deque[tuple[T, Future]] = deque()

    def __enter__(self) -> EncodeAhead[T, R]:
        return self

    def __exit__(self, *exc) -> None:
        for _, future in self._pending:
            future.cancel()
        self._pending.clear()
        if self._pool is not None:
            self._pool.shutdown(wait=True)

    def __iter__(self) -> Iterator[tuple[T, R]]:
        if self._pool is None:  # one at a time: no thread, no queue
            yield from ((batch, self._process(batch)) for batch in self._batches)
            return
        for batch in self._batches:
            self._pending.append((batch, self._pool.submit(self._process, batch)))
            if len(self._pending) > self._width:  # so ``width`` calls still run while the consumer works
                yield self._next()
        while self._pending:
            yield self._next()

    def _next(self) -> tuple[T, R]:
        batch, future = self._pending.popleft()
        return batch, future.result()


def encode_width(tasks_at_once: int = 1) -> int:
    """H5PIPE_ENCODE_AHEAD as a width (a whole number >= 1); unset, DEFAULT_WIDTH for a stage
    that has the machine to itself, 1 when ``tasks_at_once`` stages share it (a flow's concurrent
    chunks already keep the cores busy: measured in the module docstring's terms, 400 MB in 10 MB
    chunks, two tasks at once, the flow took 5.8-6.0 s at width 1 against 6.2-6.5 s at width 2,
    with ~100 MiB less peak memory)."""
    raw = os.environ.get(WIDTH_ENV, "").strip()
    if not raw:
        return DEFAULT_WIDTH if tasks_at_once <= 1 else 1
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"{WIDTH_ENV}={raw!r} is not a number of batches: set it to 2 (the default, two batches "
            "encoded at once) or 1 (one at a time, the least memory)"
        )
    return int(raw)
