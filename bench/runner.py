"""Run one row in a fresh process, R times; keep the best wall time, every peak RSS and the highest.
Several rows take their runs in rounds (``measure_rounds``).

Peak RSS is the larger of (a) the child's own ``ru_maxrss`` (exact, but blind to helpers that
run beside it) and (b) the sum of RSS over the child's whole process tree, sampled every
SAMPLE_SECONDS by this parent: datatrove's and datasets' worker processes, Prefect's temporary
server. A peak shorter than the sampling period can be missed by (b), never by (a).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import subprocess
import sys
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

import psutil

ROWS_SCRIPT = Path(__file__).resolve().parent / "rows.py"
SAMPLE_SECONDS = 0.05


@dataclass
class Result:
    name: str
    seconds: float  # best of the repetitions
    tokens: int | None
    peak_rss: int  # bytes, highest over the repetitions
    runs: list[float]
    detail: dict
    error: str | None = None
    peaks: list[int] = field(default_factory=list)  # bytes, each repetition's


class TreeSampler(threading.Thread):
    """Samples the summed RSS of a process and its descendants until the process ends."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.root = psutil.Process(pid)
        self.peak = 0
        self.done = threading.Event()

    def run(self) -> None:
        while not self.done.wait(SAMPLE_SECONDS):
            self.peak = max(self.peak, tree_rss(self.root))


def tree_rss(root: psutil.Process) -> int:
    total = 0
    try:
        procs = [root, *root.children(recursive=True)]
    except psutil.Error:
        return 0
    for proc in procs:
        with contextlib.suppress(psutil.Error):  # a helper may exit between listing and reading
            total += proc.memory_info().rss
    return total


def child_env(work: Path) -> dict:
    """Each run gets its own Prefect home and HF cache, so runs never share a database or cache."""
    env = dict(os.environ)
    env.setdefault("PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS", "120")
    env["PREFECT_HOME"] = str(work / "prefect-home")
    env.setdefault("PREFECT_LOGGING_LEVEL", "WARNING")
    env.setdefault("PREFECT_SERVER_ANALYTICS_ENABLED", "false")  # no telemetry calls from an offline machine
    env.setdefault("PREFECT_UI_ENABLED", "false")  # the temporary server need not serve the UI
    env["HF_DATASETS_CACHE"] = str(work / "hf-cache")
    env["HF_DATASETS_OFFLINE"] = "1"
    return env


def run_once(name: str, corpus: Path, work: Path, log: Path) -> tuple[dict, int]:
    """One repetition of ``name`` in a new process: (its result JSON, sampled tree peak)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    result = work / "result.json"
    with open(log, "ab") as out:
        proc = subprocess.Popen(
            [sys.executable, str(ROWS_SCRIPT), name, str(corpus), str(work), str(result)],
            stdout=out,
            stderr=subprocess.STDOUT,
            env=child_env(work),
        )
        sampler = TreeSampler(proc.pid)
        sampler.start()
        code = proc.wait()
        sampler.done.set()
        sampler.join()
    if code != 0 or not result.exists():
        raise RuntimeError(f"{name} failed with exit code {code}; see {log}")
    return json.loads(result.read_text()), sampler.peak


def measure(name: str, corpus: Path, work_root: Path, repeat: int, log: Path) -> Result:
    """``repeat`` fresh runs of one row: its best time, every peak and the highest."""
    return measure_rounds([(name, repeat)], corpus, work_root, log)[0]


def measure_rounds(
    wanted: list[tuple[str, int]],
    corpus: Path,
    work_root: Path,
    log: Path,
    progress: Callable[[int, str, float | str], None] | None = None,
) -> list[Result]:
    """``measure`` of several rows, ``(name, repeat)`` each, their repetitions taken in rounds:
    round i runs, in order, every row that wants an i-th run and has not failed. On a shared
    machine a slow spell then falls on every row alike instead of on all runs of one, and the
    report compares rows with each other (a row's "of gigatoken" is two rows' best times).
    ``progress(round, name, seconds or error)`` is called after each run."""
    tallies = [_Tally(name) for name, _ in wanted]
    for i in range(max((repeat for _, repeat in wanted), default=0)):
        for tally, (_, repeat) in zip(tallies, wanted, strict=True):
            if i < repeat and tally.error is None:
                tally.run(corpus, work_root / f"{_slug(tally.name)}-{i}", log)
                if progress is not None:
                    progress(i, tally.name, tally.error or tally.runs[-1])
    return [tally.result() for tally in tallies]


@dataclass
class _Tally:
    """One row's runs so far."""

    name: str
    runs: list[float] = field(default_factory=list)
    peaks: list[int] = field(default_factory=list)
    best: dict | None = None
    error: str | None = None

    def run(self, corpus: Path, work: Path, log: Path) -> None:
        try:
            out, sampled = run_once(self.name, corpus, work, log)
        except RuntimeError as err:  # the row's later runs are skipped; its result says why
            self.error = str(err)
            return
        shutil.rmtree(work, ignore_errors=True)
        self.runs.append(out["seconds"])
        self.peaks.append(max(sampled, out["peak_rss_self"]))
        if self.best is None or out["seconds"] < self.best["seconds"]:
            self.best = out

    def result(self) -> Result:
        if self.error is not None or self.best is None:
            return Result(self.name, float("nan"), None, 0, self.runs, {}, self.error or "no run", self.peaks)
        best = self.best
        return Result(
            self.name, best["seconds"], best["tokens"], max(self.peaks), self.runs, best["detail"], peaks=self.peaks
        )


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")
