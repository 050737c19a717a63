"""What a benchmark row is and what it measures: its context, its result, a timer."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path


@dataclass(frozen=True)
class Context:
    corpus: Path  # holds pt/, sft/, dpo/ folders of train_chunk_{i}.jsonl
    work: Path  # an empty folder for this run's outputs

    def files(self, shape: str) -> list[Path]:
        return sorted(self.folder(shape).glob("*.jsonl"), key=lambda p: int(p.stem.rsplit("_", 1)[1]))

    def folder(self, shape: str) -> Path:
        return self.corpus / shape


@dataclass
class Measured:
    seconds: float
    tokens: int | None  # None: the row does not count tokens; the reference count is used
    detail: dict = field(default_factory=dict)


@dataclass(frozen=True)
class Row:
    """``reference``: the row whose wall time, on the same input, ``ratio`` divides by.
    ``target``: the ratio the issue asks for. ``fast``: the raw gigatoken row on the same input,
    to show what share of the fast backend's speed a pipeline row keeps. ``needs``: a module
    that must import for the row to run; ``needs_env``: an environment variable that must name an
    existing path (a checkout of a tool that is not on PyPI). ``runs``: at least this many repetitions, whatever
    ``--repeat`` says."""

    name: str
    shape: str
    run: Callable[[Context], Measured]
    reference: str | None = None
    target: float | None = None
    fast: str | None = None
    needs: str | None = None
    note: str = ""
    runs: int = 1
    needs_env: str | None = None


def timed(work: Callable[[], object]) -> tuple[float, object]:
    start = time.perf_counter()
    out = work()
    return time.perf_counter() - start, out
