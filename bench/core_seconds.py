"""Where the pt stage's time goes beside raw gigatoken's: wall and CPU seconds of each part.

    python bench/core_seconds.py [--size-mb 400] [--chunk-mb 10] [--repeat 2]

The library rows of bench/throughput.py compare the stage (read JSONL, encode, pack, write HDF5)
with gigatoken encoding texts already in memory with one tokenizer for the whole corpus. This
script splits the difference. Each part runs in a fresh process (best of ``--repeat``), timed in
wall and CPU seconds (user + system, every thread):

- ``parse``: read every chunk and ``orjson.loads`` each line, keeping the text (the least any
  JSONL reader does);
- ``gigatoken``: raw ``encode_batch`` of those texts, 1,000 per call, as bench/rows.py's row;
- ``gigatoken, rebuilt``: the same, loading a new tokenizer after every
  ``DEFAULT_RESET_EVERY_CHARS`` characters as GigatokenBackend does to bound its cache's memory;
- ``stage``: ``cache_jsonl`` unpacked and packed 2048 (the library rows), with the default cache
  bound and with ``H5PIPE_GIGATOKEN_RESET_CHARS=0`` (never rebuilt).

"cores busy" is CPU / wall: how much of the machine a part keeps working. The raw row and the
unpacked stage also report CPU seconds per thread (gigatoken's own pool, the stage's reading,
hashing, encode and HDF5 threads, the main thread), and the report ends with the budget: the CPU
time ``cores`` cores give in the wall time that 70% of raw gigatoken's speed allows, beside the
CPU time the stage spends.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from contextlib import contextmanager
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import GPT2, GPT2_EOS, CorpusSpec, build, read_column  # noqa: E402
from bench.measure import Context  # noqa: E402
from pipeline_core.tokenizer.gigatoken import DEFAULT_RESET_EVERY_CHARS  # noqa: E402

BENCH = Path(__file__).resolve().parent
BATCH = 1000


def cpu_seconds() -> float:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime


TICKS = os.sysconf("SC_CLK_TCK")
TARGET = 0.7  # issue 19: the library stage at >= 70% of raw gigatoken's speed


def _native_thread_cpu() -> dict[int, float]:
    """CPU seconds of this process's threads that Python did not start (gigatoken's Rust pool)."""
    python = {t.native_id for t in threading.enumerate()}
    out = {}
    for tid in map(int, os.listdir("/proc/self/task")):
        if tid in python:
            continue
        try:
            fields = Path(f"/proc/self/task/{tid}/stat").read_text().rsplit(")", 1)[1].split()
        except OSError:  # ended meanwhile
            continue
        out[tid] = (int(fields[11]) + int(fields[12])) / TICKS
    return out


@contextmanager
def thread_cpu():
    """Yields a Counter that, after the block, holds CPU seconds by thread name: the main thread,
    every Python thread started in the block (taken as it ends: the stage's threads end with it)
    and ``native pool`` for the threads Python did not start (they outlive the block)."""
    spent: Counter = Counter()
    run = threading.Thread.run

    def timed_run(thread: threading.Thread) -> None:
        try:
            run(thread)
        finally:
            spent[thread.name.rstrip("0123456789_").rstrip("-_ ")] += time.thread_time()

    native, main = _native_thread_cpu(), time.thread_time()
    threading.Thread.run = timed_run
    try:
        yield spent
    finally:
        threading.Thread.run = run
        spent["main"] += time.thread_time() - main
        after = _native_thread_cpu()
        spent["native pool (gigatoken)"] += sum(cpu - native.get(tid, 0.0) for tid, cpu in after.items())


def texts_of(files: list[Path]) -> list[str]:
    return read_column(files, ("text",))  # what bench/rows.py's raw rows read


def part_parse(files: list[Path]) -> dict:
    wall, cpu = time.perf_counter(), cpu_seconds()
    texts = texts_of(files)
    return {"wall": time.perf_counter() - wall, "cpu": cpu_seconds() - cpu, "texts": len(texts)}


def part_gigatoken(files: list[Path], rebuild_every: int = 0) -> dict:
    """Raw encode; with ``rebuild_every``, a new tokenizer after that many characters (as the backend)."""
    import gigatoken

    texts = texts_of(files)
    source = GPT2.read_text(encoding="utf-8")
    tok = gigatoken.Tokenizer.from_json(source)
    tok.encode_batch(["warm up"])
    wall, cpu = time.perf_counter(), cpu_seconds()
    tokens = chars = rebuilds = 0
    with thread_cpu() as threads:
        for i in range(0, len(texts), BATCH):
            batch = texts[i : i + BATCH]
            if rebuild_every and chars >= rebuild_every:
                tok = None  # dropped before the next one loads, as GigatokenBackend does
                tok, chars, rebuilds = gigatoken.Tokenizer.from_json(source), 0, rebuilds + 1
            tokens += int(tok.encode_batch(batch).layout.offsets.data[-1])
            chars += sum(map(len, batch))
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    return {"wall": wall, "cpu": cpu, "tokens": tokens, "rebuilds": rebuilds, "threads": dict(threads)}


def part_stage(folder: Path, pack: int, work: Path) -> dict:
    from pipeline_core import AutoTokenizer, ProcessorFactory
    from pipeline_core.stages.cache import cache_jsonl

    tok = AutoTokenizer.from_file(GPT2, eos_token=GPT2_EOS)  # as bench/rows.py's library rows
    tok.encode("warm up")
    processor = ProcessorFactory.create("pt", tok)
    pad = tok.eos_token_id if pack else None
    out = tempfile.mkdtemp(prefix="h5-", dir=work)
    wall, cpu = time.perf_counter(), cpu_seconds()
    with thread_cpu() as threads:
        cache_jsonl(str(folder), out, processor, pack, pad)
    wall, cpu = time.perf_counter() - wall, cpu_seconds() - cpu
    shutil.rmtree(out)
    return {"wall": wall, "cpu": cpu, "threads": dict(threads)}


def run_part(args: list[str], env: dict | None = None) -> dict:
    """One part in a fresh process; its JSON result."""
    cmd = [sys.executable, __file__, "--part", *args]
    done = subprocess.run(cmd, capture_output=True, text=True, env={**os.environ, **(env or {})}, check=True)
    return json.loads(done.stdout.strip().splitlines()[-1])


def best(args: list[str], repeat: int, env: dict | None = None) -> dict:
    runs = [run_part(args, env) for _ in range(repeat)]
    return min(runs, key=lambda r: r["wall"])


def measure(corpus_root: Path, repeat: int, cores: int) -> dict:
    folder = corpus_root / "pt"
    work = corpus_root.parent / "core-seconds-work"
    work.mkdir(exist_ok=True)
    parts = {
        "parse": best(["parse", str(folder)], repeat),
        "gigatoken": best(["gigatoken", str(folder)], repeat),
        "gigatoken, rebuilt": best(["gigatoken", str(folder), str(DEFAULT_RESET_EVERY_CHARS)], repeat),
    }
    for pack in (0, 2048):
        for reset in ("", "0"):
            name = f"stage pack={pack}" + (" reset=never" if reset else "")
            parts[name] = best(
                ["stage", str(folder), str(pack), str(work)], repeat, {"H5PIPE_GIGATOKEN_RESET_CHARS": reset}
            )
    return {"cores": cores, "parts": parts}


def report(result: dict) -> str:
    parts = result["parts"]
    raw, rebuilt = parts["gigatoken"]["wall"], parts["gigatoken, rebuilt"]["wall"]
    lines = [
        "| part | wall s | CPU s | cores busy | of raw gigatoken | of gigatoken, rebuilt |",
        "|---|---|---|---|---|---|",
    ]
    for name, part in parts.items():
        shares = f"{raw / part['wall']:.0%} | {rebuilt / part['wall']:.0%}" if name.startswith("stage") else "- | -"
        busy = part["cpu"] / part["wall"]
        lines.append(f"| {name} | {part['wall']:.2f} | {part['cpu']:.2f} | {busy:.2f} | {shares} |")
    return "\n".join(lines + ["", *per_thread(parts), "", budget(parts, result["cores"])])


def per_thread(parts: dict) -> list[str]:
    """CPU seconds by thread of the raw row and the unpacked stage (the runs the table shows)."""
    rows = {"gigatoken": parts["gigatoken"]["threads"], "stage pack=0": parts["stage pack=0"]["threads"]}
    names = sorted({n for t in rows.values() for n in t}, key=lambda n: -max(t.get(n, 0.0) for t in rows.values()))
    lines = ["| thread | " + " | ".join(f"{r}: CPU s" for r in rows) + " |", "|---|" + "---|" * len(rows)]
    for name in names:
        lines.append(f"| {name} | " + " | ".join(f"{t.get(name, 0.0):.2f}" for t in rows.values()) + " |")
    rest = [parts[r]["cpu"] - sum(t.values()) for r, t in rows.items()]  # threads that ended unseen, rounding
    return [*lines, "| (process CPU not in a thread above) | " + " | ".join(f"{x:.2f}" for x in rest) + " |"]


def budget(parts: dict, cores: int) -> str:
    """The CPU time ``cores`` cores give in the wall time 70% of raw gigatoken's speed allows,
    beside the unpacked stage's own CPU time."""
    allowed = parts["gigatoken"]["wall"] / TARGET
    stage = parts["stage pack=0"]
    return (
        f"At {TARGET:.0%} of raw gigatoken's speed the unpacked stage would have {allowed:.2f} s of wall time, "
        f"{cores} cores x {allowed:.2f} s = {cores * allowed:.2f} s of CPU at most, every core busy all the time; "
        f"it spent {stage['cpu']:.2f} s of CPU ({stage['cpu'] / stage['wall']:.2f} cores busy over {stage['wall']:.2f} s)."
    )


def part_main(argv: list[str]) -> None:
    kind, folder = argv[0], Path(argv[1])
    files = Context(corpus=folder.parent, work=folder.parent).files(folder.name)  # in chunk order (no work written)
    if kind == "parse":
        out = part_parse(files)
    elif kind == "gigatoken":
        out = part_gigatoken(files, int(argv[2]) if len(argv) > 2 else 0)
    else:
        out = part_stage(folder, int(argv[2]), Path(argv[3]))
    print(json.dumps(out))


def main() -> None:
    if len(sys.argv) > 1 and sys.argv[1] == "--part":
        part_main(sys.argv[2:])
        return
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size-mb", type=float, default=400)
    parser.add_argument("--chunk-mb", type=float, default=10)
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    args = parser.parse_args()
    root = args.out / f"corpus-{args.size_mb:g}mb-{args.chunk_mb:g}mb"
    build(root, CorpusSpec(args.size_mb, args.chunk_mb))
    load = os.getloadavg()
    result = measure(root, args.repeat, len(os.sched_getaffinity(0)))
    print(f"{result['cores']} cores; load {load[0]:.2f} at the start, {os.getloadavg()[0]:.2f} at the end")
    print(report(result))


if __name__ == "__main__":
    main()
