"""Run one row in a fresh process, R times; keep the best wall time, every peak RSS and the highest.

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
    runs, peaks, best = [], [], None
    try:
        for i in range(repeat):
            work = work_root / f"{_slug(name)}-{i}"
            out, sampled = run_once(name, corpus, work, log)
            shutil.rmtree(work, ignore_errors=True)
            runs.append(out["seconds"])
            peaks.append(max(sampled, out["peak_rss_self"]))
            if best is None or out["seconds"] < best["seconds"]:
                best = out
    except RuntimeError as err:
        return Result(name, float("nan"), None, 0, runs, {}, str(err), peaks)
    return Result(name, best["seconds"], best["tokens"], max(peaks), runs, best["detail"], peaks=peaks)


def _slug(name: str) -> str:
    return "".join(c if c.isalnum() else "-" for c in name).strip("-")
