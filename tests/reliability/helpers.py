"""Shared pieces of the reliability tests: inputs, worker processes, and exactly-once checks."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from flows.params import CacheParams
from pipeline_core.formats.h5 import OFFSETS_SUFFIX, open_h5
from tests.conftest import ROOT

EOS = "<|endoftext|>"


def write_jsonl(path: Path, rows: list[dict]) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        for row in rows:
            f.write(json.dumps(row, ensure_ascii=False) + "\n")
    return path


def write_chunks(folder: Path, rows: list[dict], n_chunks: int) -> Path:
    per = -(-len(rows) // n_chunks)
    for i in range(n_chunks):
        write_jsonl(folder / f"train_chunk_{i}.jsonl", rows[i * per : (i + 1) * per])
    return folder


def cache_params(gpt2_path, input, output, **kw) -> CacheParams:
    run = {"retry_delay": 0.05, **kw.pop("run", {})}
    tokenizer = {"path": str(gpt2_path), "eos_token": EOS}
    return CacheParams(input=str(input), output=str(output), tokenizer=tokenizer, run=run, **kw)


@dataclass(frozen=True)
class CachedRun:
    """A finished cache_flow run over 4 chunks, and a copy of its outputs as first written."""

    params: CacheParams
    out: Path
    originals: Path
    mtimes: dict[str, int]


def cached_run(gpt2_path, tmp_path: Path, rows: list[dict]) -> CachedRun:
    from flows.cache_flow import cache_flow

    out = tmp_path / "out"
    params = cache_params(gpt2_path, write_chunks(tmp_path / "in", rows, 4), out)
    cache_flow(params)
    shutil.copytree(out, tmp_path / "originals")
    return CachedRun(params, out, tmp_path / "originals", mtimes(out))


def published(folder: Path, pattern: str = "*.h5") -> list[Path]:
    """Files under final names (pathlib's glob also matches the hidden temps)."""
    return sorted(p for p in folder.glob(pattern) if not p.name.startswith("."))


def mtimes(folder: Path, pattern: str = "*.h5") -> dict[str, int]:
    return {p.name: p.stat().st_mtime_ns for p in published(folder, pattern)}


def hidden(folder: Path) -> list[str]:
    """Dot files and folders (temps) directly in ``folder``, the ``.h5pipe`` results folder aside."""
    return sorted(p.name for p in folder.iterdir() if p.name.startswith(".") and p.name != ".h5pipe")


def sequences(url) -> list[list[int]]:
    """Every sample of an unpacked ``sequence`` output, in order."""
    with open_h5(str(url)) as f:
        if "sequence" not in f:
            return []
        values, offsets = f["sequence"][...], f["sequence" + OFFSETS_SUFFIX][...]
    return [values[a:b].tolist() for a, b in zip(offsets[:-1], offsets[1:])]


def expected_sequences(tokenizer, texts: list[str]) -> list[list[int]]:
    """What the pt processor must write for ``texts``, computed independently: encode + eos."""
    return [list(tokenizer.encode(t)) + [tokenizer.eos_token_id] for t in texts]


def assert_exactly_once(url, tokenizer, texts: list[str]) -> None:
    got = sequences(url)
    want = expected_sequences(tokenizer, texts)
    assert len(got) == len(want), f"{url}: {len(got)} samples for {len(want)} rows"
    assert all(np.array_equal(a, b) for a, b in zip(got, want)), f"{url}: samples differ from the rows, in order"


# ---- worker processes -----------------------------------------------------------------------------


def start_worker(*args: str, env: dict | None = None) -> subprocess.Popen:
    """``python -m tests.reliability.worker ARGS``; returns once the worker printed its first line."""
    process = subprocess.Popen(
        [sys.executable, "-m", "tests.reliability.worker", *map(str, args)],
        cwd=ROOT,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env={**os.environ, **(env or {})},
    )
    process.first_line = process.stdout.readline().strip()
    if not process.first_line:
        process.wait(timeout=60)
        raise RuntimeError(f"worker {args} died before starting: {process.stderr.read()[-3000:]}")
    return process


def kill(process: subprocess.Popen) -> None:
    """SIGKILL and reap (a zombie would still look alive to a sweeper)."""
    process.send_signal(signal.SIGKILL)
    process.wait(timeout=30)
    process.stdout.close()
    process.stderr.close()


def wait_for(predicate: Callable[[], object], process: subprocess.Popen | None = None, timeout: float = 120):
    """Poll ``predicate`` every millisecond until it returns something truthy."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if value := predicate():
            return value
        if process is not None and process.poll() is not None:
            raise AssertionError(f"worker ended (rc {process.returncode}) before the moment to kill it")
        time.sleep(0.001)
    raise AssertionError("timed out waiting for the moment to kill the worker")


def temp_of(folder: Path, name: str, min_size: int = 0) -> Callable[[], Path | None]:
    """A predicate: the staging temp of ``name`` in ``folder`` once it holds ``min_size`` bytes."""

    def find() -> Path | None:
        for entry in os.scandir(folder) if folder.exists() else ():
            if entry.name.startswith(f".{name}.tmp-") and _size(entry) >= min_size:
                return Path(entry.path)
        return None

    return find


def _size(entry: os.DirEntry) -> int:
    try:
        return entry.stat().st_size
    except FileNotFoundError:
        return -1
