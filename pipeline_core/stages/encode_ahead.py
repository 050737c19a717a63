"""Encode ahead: the next batches are processed in worker threads while the caller writes this one.

``EncodeAhead(process, batches, width)`` yields ``(batch, process(batch))`` in the order of
``batches``. A feeder thread submits each batch to ``width`` worker threads as it arrives, and
at most ``width + 1`` results wait for the consumer beyond the one it holds: the consumer busy
writing a batch or closing a file (waiting for its writes) no longer leaves the workers without
work, as it did when it submitted the next batch itself between two results (docs/performance.md,
"Inputs in one stream"). A call's exception is raised in the consumer at its place in that
order, after the results before it. Leaving the ``with`` block early cancels the calls not
started and waits for the running ones, so no thread outlives the block. ``inline=True``
processes each batch in the consumer's thread, nothing ahead (for a processor that must not run
beside the consumer, or to save the memory of the batches ahead).

Width. gigatoken spreads one call over every core itself, and two calls at once cost CPU: on
100 MB of the bench corpus (GPT-2, 2 cores, a warm tokenizer), two calls at once of 800 texts
each took 0.25-0.38 s wall for 0.46-0.68 s CPU, one call at a time of 3,200 texts 0.23-0.34 s for
0.41-0.54 s, and of 800 texts 0.34-0.48 s for 0.40-0.56 s (one call of a small batch keeps about
one core busy). So the stage encodes one batch at a time (``DEFAULT_WIDTH``) in batches of up to
16 MiB of JSON (``formats.jsonl.BATCH_BYTES``); on a machine with the cores to spare,
``H5PIPE_ENCODE_AHEAD=2`` runs two. On 2 cores each call runs on its worker thread, not on
gigatoken's pool (tokenizer/encode_pool.py: the reader and writer need the other core).
"""

from __future__ import annotations

import os
from collections import deque
from collections.abc import Callable, Iterable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from typing import Generic, TypeVar

from pipeline_core.errors import ConfigError
from pipeline_core.stages.read_ahead import ReadAhead
from pipeline_core.tokenizer.encode_pool import beside_the_stage

WIDTH_ENV = "H5PIPE_ENCODE_AHEAD"  # batches encoded at once by the cache stage; 1: one at a time
DEFAULT_WIDTH = 1
T = TypeVar("T")
R = TypeVar("R")


class EncodeAhead(Generic[T, R]):
    """``with EncodeAhead(process, batches, width) as done: for batch, result in done: ...``."""

    def __init__(
        self, process: Callable[[T], R], batches: Iterable[T], width: int = DEFAULT_WIDTH, inline: bool = False
    ) -> None:
        if width < 1:
            raise ValueError(f"width must be at least 1, got {width}")
        self._process, self._batches, self._width = process, batches, width
        self._pool = None if inline else ThreadPoolExecutor(width, "h5pipe-encode", beside_the_stage)
        self._waiting: deque[Future] = deque()  # submitted, not yet handed to the consumer, in order
        self._feed = None if inline else ReadAhead(self._submitted(), width, name="h5pipe-encode-feed")

    def __enter__(self) -> EncodeAhead[T, R]:
        if self._feed is not None:
            self._feed.__enter__()
        return self

    def __exit__(self, *exc) -> None:
        if self._feed is None:
            return
        self._feed.close()  # no more submissions
        for future in self._waiting:
            future.cancel()
        self._waiting.clear()
        self._pool.shutdown(wait=True)

    def __iter__(self) -> Iterator[tuple[T, R]]:
        if self._feed is None:  # one at a time: no thread, no queue
            yield from ((batch, self._process(batch)) for batch in self._batches)
            return
        for batch, future in self._feed:
            result = future.result()
            self._waiting.popleft()
            yield batch, result

    def _submitted(self) -> Iterator[tuple[T, Future]]:
        for batch in self._batches:
            future = self._pool.submit(self._process, batch)
            self._waiting.append(future)
            yield batch, future


def encode_width() -> int:
    """H5PIPE_ENCODE_AHEAD as a width (a whole number >= 1); unset, DEFAULT_WIDTH (see the module
    docstring: one gigatoken call at a time keeps the cores busy at the least CPU)."""
    raw = os.environ.get(WIDTH_ENV, "").strip()
    if not raw:
        return DEFAULT_WIDTH
    if not raw.isdigit() or int(raw) < 1:
        raise ConfigError(
            f"{WIDTH_ENV}={raw!r} is not a number of batches: set it to 1 (the default, one batch "
            "encoded at a time) or 2 (two at once, on a machine with cores to spare)"
        )
    return int(raw)
