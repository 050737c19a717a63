"""A terminal progress bar fed by the flows' progress artifacts (only on a TTY)."""

from __future__ import annotations

import contextlib
import sys
from collections.abc import Callable, Iterator

Listener = Callable[[str, int, int], None]  # (stage key, done, total)
LISTENERS: list[Listener] = []


def notify(key: str, done: int, total: int) -> None:
    for listener in list(LISTENERS):
        listener(key, done, total)


@contextlib.contextmanager
def terminal_progress() -> Iterator[None]:
    if not sys.stderr.isatty():
        yield
        return
    from rich.progress import Progress

    with Progress(transient=False) as bar:
        tasks: dict[str, int] = {}

        def update(key: str, done: int, total: int) -> None:
            if key not in tasks:
                tasks[key] = bar.add_task(key, total=total)
            bar.update(tasks[key], completed=done, total=total)

        LISTENERS.append(update)
        try:
            yield
        finally:
            LISTENERS.remove(update)
