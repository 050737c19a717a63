"""Read ahead: a background thread runs an iterator a bounded number of items ahead of its consumer.

The cache stage reads, hashes and parses the next JSONL batch in this thread while the tokenizer
encodes the current one: the fast backend releases the GIL while it encodes, so the two overlap
on two cores instead of taking turns. What the consumer sees is unchanged: the same items in the
same order, and an exception raised by the iterator is raised again in the consumer, after the
items produced before it, with its own traceback.

Memory: at most ``depth`` items wait in the queue, plus the one the thread is building and the
one the consumer holds. Leaving the ``with`` block early (an error downstream, a break) stops the
thread once its current item is built and closes the iterator in that thread, so a file it reads
is closed before the block is left.
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from typing import Generic, TypeVar

T = TypeVar("T")
_END = object()
_POLL = 0.1  # seconds between checks of the stop flag while the queue is full


@dataclass(frozen=True, slots=True)
class _Failed:
    error: BaseException


class ReadAhead(Generic[T]):
    """``with ReadAhead(items, depth) as ahead: for item in ahead: ...`` (see the module docstring)."""

    def __init__(self, items: Iterable[T], depth: int = 1, name: str = "h5pipe-read-ahead") -> None:
        if depth < 1:
            raise ValueError(f"depth must be at least 1, got {depth}")
        self._items = items
        self._queue: queue.Queue = queue.Queue(maxsize=depth)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._produce, name=name, daemon=True)

    def __enter__(self) -> ReadAhead[T]:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.close()

    def __iter__(self) -> Iterator[T]:
        while (item := self._queue.get()) is not _END:
            if isinstance(item, _Failed):
                raise item.error
            yield item

    def close(self) -> None:
        """Stop the thread (after the item it is building) and wait for it to close the iterator."""
        self._stop.set()
        if self._thread.is_alive():
            self._thread.join()

    def _produce(self) -> None:
        items = iter(self._items)
        try:
            for item in items:
                if not self._put(item):
                    return
            self._put(_END)
        except BaseException as error:  # handed to the consumer, raised there
            self._put(_Failed(error))
        finally:
            getattr(items, "close", lambda: None)()

    def _put(self, item) -> bool:
        """Queue ``item`` unless the consumer has stopped; False if it has."""
        while not self._stop.is_set():
            try:
                self._queue.put(item, timeout=_POLL)
                return True
            except queue.Full:
                continue
        return False
