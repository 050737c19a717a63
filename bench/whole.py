"""Whole-process rows: ``h5pipe cache`` exactly as a user types it, timed from outside the process.

    python bench/whole.py [--repeat 3] [--out bench/results] [--main-corpus DIR] [--small-only]

The in-process rows (bench/rows.py) time a stage inside a running interpreter; a user also pays
the interpreter, the imports, the Prefect server and the teardown. Every row here is the wall
time of a fresh ``h5pipe`` process (median of ``--repeat``, interleaved), in its own PREFECT_HOME
and h5pipe cache dir, with the kept server on a free port (never the user's 4200):

- small job (1 MB, 1 chunk) with Prefect's temporary server per run (``H5PIPE_SERVER=temporary``,
  what every run cost before h5pipe kept a server);
- the same with no server and no warm process running (the run starts the kept server and leaves
  a warm process: a user's first run);
- the same with the kept server and the warm process running (flows/warm/), and with the kept
  server but ``H5PIPE_WARM=off``; then the fully cached rerun, warm and not;
- 1,000 small chunks against 1 chunk of the same 4 MB (flow seconds from the run's summary, and
  whole-process wall), and the 1,000-chunk cached rerun;
- the main corpus (``--main-corpus``, 10 MB chunks) through the threads, processes and dask
  runners, with the kept server;
- bytes per token and file size of the small job's output.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import socket
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import GPT2, GPT2_EOS, CorpusSpec, build  # noqa: E402

BENCH = Path(__file__).resolve().parent
H5PIPE = [sys.executable, "-c", "from flows.entry import main; main()"]  # the console script's entry


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def env_for(work: Path, port: int) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_API_URL", "H5PIPE_SERVER", "H5PIPE_WARM"))}
    env.update(
        PREFECT_HOME=str(work / "prefect-home"),
        H5PIPE_CACHE_DIR=str(work / "cache"),
        PREFECT_SERVER_API_PORT=str(port),
        PREFECT_LOGGING_LEVEL="WARNING",
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
        TOKENIZERS_PARALLELISM="false",
    )
    return env


def cache_args(inputs: Path, output: Path, runner: str = "threads") -> list[str]:
    tokenizer = ["--tokenizer", str(GPT2), "--eos-token", GPT2_EOS, "--pad-token", GPT2_EOS]
    return ["cache", "--input", str(inputs), "--output", str(output), *tokenizer, "--pack-size", "2048",
            "--task-runner", runner]  # fmt: skip


def timed(env: dict, args: list[str], **extra_env) -> tuple[float, dict]:
    """(wall seconds of the whole process, its printed summary)."""
    started = time.perf_counter()
    done = subprocess.run([*H5PIPE, *args], env={**env, **extra_env}, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"h5pipe {' '.join(args[:1])} failed ({done.returncode}): {done.stderr[-2000:]}")
    out = done.stdout
    return wall, json.loads(out[out.index("{") :]) if "{" in out else {}


def server(env: dict, command: str) -> str:
    return subprocess.run([*H5PIPE, "server", command], env=env, capture_output=True, text=True).stdout.strip()


class Rows:
    def __init__(self, work: Path, repeat: int) -> None:
        self.work, self.repeat = work, repeat
        self.env = env_for(work, free_port())
        self.rows: list[dict] = []
        self.n = 0

    def output(self) -> Path:
        self.n += 1
        return self.work / f"out-{self.n}"

    def add(self, name: str, walls: list[float], summary: dict, note: str = "") -> None:
        row = {"row": name, "wall": statistics.median(walls), "runs": walls, "note": note}
        row.update({k: summary.get(k) for k in ("chunks", "tokens_written", "seconds", "cached_chunks")})
        self.rows.append(row)
        print(f"  {name}: median {row['wall']:.2f} s of {[round(w, 2) for w in walls]} {note}", flush=True)


def wait_for_warm(env: dict, timeout: float = 180.0) -> None:
    """Until a warm process serves (its socket exists): a cold run leaves one starting in the background."""
    state = Path(env["H5PIPE_CACHE_DIR"]) / "prefect-server"
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for record in state.glob("warm-*.json"):
            with contextlib.suppress(OSError, ValueError):
                if Path(json.loads(record.read_text())["socket"]).exists():
                    return
        time.sleep(0.2)
    raise RuntimeError(f"no warm process came up within {timeout:.0f} s; see {state / 'warm.log'}")


SMALL_ROWS = {
    "temporary": "small job, Prefect's temporary server per run",
    "cold": "small job, no server nor warm process running (starts both)",
    "warm": "small job, kept server + warm process running",
    "kept": "small job, kept server running, H5PIPE_WARM=off",
    "cached_warm": "small job, fully cached rerun, kept server + warm process",
    "cached": "small job, fully cached rerun, kept server, H5PIPE_WARM=off",
}


def small_job(rows: Rows, small: Path) -> tuple[Path, dict]:
    walls: dict[str, list[float]] = {k: [] for k in SMALL_ROWS}
    summaries: dict[str, dict] = {}

    def run(kind: str, output: Path, **extra) -> None:
        wall, summaries[kind] = timed(rows.env, cache_args(small, output), **extra)
        walls[kind].append(wall)

    for _ in range(rows.repeat):
        run("temporary", rows.output(), H5PIPE_SERVER="temporary")
        server(rows.env, "stop")  # the kept server and the warm processes
        run("cold", rows.output())
        wait_for_warm(rows.env)
        last = rows.output()
        run("warm", last)
        run("kept", rows.output(), H5PIPE_WARM="off")
        run("cached_warm", last)
        run("cached", last, H5PIPE_WARM="off")
    for kind, name in SMALL_ROWS.items():
        rows.add(name, walls[kind], summaries[kind])
    return last, summaries["warm"]


def many_chunks(rows: Rows, one: Path, many: Path) -> None:
    for name, inputs in (("4 MB in 1 chunk", one), ("4 MB in 1,000 chunks", many)):
        output = rows.output()
        wall, summary = timed(rows.env, cache_args(inputs, output))
        rows.add(f"{name}, kept server", [wall], summary, f"flow {summary.get('seconds')} s")
        if inputs == many:
            again, summary = timed(rows.env, cache_args(inputs, output))
            rows.add(f"{name}, fully cached rerun", [again], summary)


def runners(rows: Rows, corpus: Path) -> None:
    walls: dict[str, list[float]] = {r: [] for r in ("threads", "processes", "dask")}
    summaries: dict[str, dict] = {}
    for _ in range(rows.repeat):
        for runner in walls:
            wall, summaries[runner] = timed(rows.env, cache_args(corpus, rows.output(), runner))
            walls[runner].append(wall)
            shutil.rmtree(rows.work / f"out-{rows.n}", ignore_errors=True)
    for runner, w in walls.items():
        rows.add(f"main corpus, --task-runner {runner}, kept server", w, summaries[runner])


def sample_size(output: Path, summary: dict) -> dict:
    size = sum(f.stat().st_size for f in output.glob("*.h5"))
    stored = (summary.get("packs") or 0) * 2048
    return {
        "files": len(list(output.glob("*.h5"))),
        "bytes": size,
        "tokens": summary.get("tokens_written"),
        "stored_tokens": stored,
        "bytes_per_token": size / stored if stored else None,
    }


def run(out: Path, repeat: int, main_corpus: Path | None, small_only: bool = False) -> dict:
    work = out / "whole-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    small = build(out / "corpus-whole-1mb", CorpusSpec(1, 2), shapes=("pt",)).folder("pt")
    rows = Rows(work, repeat)
    try:
        last, summary = small_job(rows, small)
        sample = sample_size(last, summary)
        if small_only:
            return {"rows": rows.rows, "sample": sample, "repeat": repeat}
        one = build(out / "corpus-whole-4mb-1", CorpusSpec(4, 8), shapes=("pt",)).folder("pt")
        many = build(out / "corpus-whole-4mb-1000", CorpusSpec(4, 0, chunks=1000), shapes=("pt",)).folder("pt")
        many_chunks(rows, one, many)
        if main_corpus is not None:
            runners(rows, main_corpus)
    finally:
        stopped = server(rows.env, "stop")
        print(f"  {stopped}", flush=True)
    shutil.rmtree(work, ignore_errors=True)
    return {"rows": rows.rows, "sample": sample, "repeat": repeat}


def markdown(whole: dict, raw_tokenizers_seconds: float | None = None) -> str:
    lines = [
        "## Whole process, as a user runs it",
        "",
        f"Each row: wall time of fresh `h5pipe cache` processes (median of {whole['repeat']}), packed 2048, GPT-2.",
        "",
        "| row | wall s (median) | each run | chunks | tokens | flow s | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in whole["rows"]:
        runs = ", ".join(f"{w:.2f}" for w in r["runs"])
        tokens = f"{r['tokens_written']:,}" if r.get("tokens_written") else "-"
        lines.append(
            f"| {r['row']} | {r['wall']:.2f} | {runs} | {r.get('chunks') or '-'} | {tokens} | {r.get('seconds') or '-'} | {r['note']} |"
        )
    threads = [r for r in whole["rows"] if r["row"].startswith("main corpus, --task-runner threads")]
    if threads and raw_tokenizers_seconds:
        ratio = raw_tokenizers_seconds / threads[0]["wall"]
        lines += ["", f"- main corpus through the CLI (threads, kept server): {ratio:.2f}x raw `tokenizers.encode_batch` "
                  f"({raw_tokenizers_seconds:.2f} s in-process, the table above) as a whole process"]  # fmt: skip
    s = whole["sample"]
    if s.get("bytes_per_token"):
        lines += [
            "",
            f"- small job output: {s['files']} file(s), {s['bytes']:,} bytes, {s['bytes_per_token']:.2f} bytes per stored token (uint16 ids + uint16 position ids + cu_seqlens)",
        ]
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--main-corpus", type=Path, help="a folder of pt chunks for the runner rows")
    parser.add_argument("--small-only", action="store_true", help="only the small-job rows")
    args = parser.parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    whole = run(args.out, args.repeat, args.main_corpus, args.small_only)
    print(markdown(whole))
    return whole


if __name__ == "__main__":
    main()
