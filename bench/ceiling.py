"""How close to raw gigatoken can the pt stage get on this machine? A lower bound from CPU time.

The raw gigatoken row (bench/rows.py) encodes texts already in memory. The stage must also read
the JSONL and parse every line, and orjson parses holding the GIL. So on ``cores`` cores the
stage cannot take less than the largest of: the encode's own wall time, the parse's CPU time (one
thread at a time), and the CPU time of read + parse + encode spread over every core. Writing the
output, packing and the per-row checks come on top. This script measures the three in one
process, ``--repeat`` times in rounds, and prints the best of each and the share of raw
gigatoken's speed that the bound leaves:

    python -m bench.ceiling --size-mb 400 --chunk-mb 10 --repeat 3   # from the project root
"""

from __future__ import annotations

import argparse
import os
import resource
import time
from pathlib import Path

import orjson

from bench.corpus import GPT2, CorpusSpec, build

BATCH = 1000  # as bench/rows.py's raw rows


def clocked(work) -> tuple[float, float, object]:
    """(wall s, CPU s of the whole process, result) of ``work()``."""
    usage = lambda: sum(resource.getrusage(resource.RUSAGE_SELF)[:2])  # noqa: E731
    cpu, wall = usage(), time.perf_counter()
    out = work()
    return time.perf_counter() - wall, usage() - cpu, out


def steps(files: list[Path]) -> dict[str, tuple[float, float]]:
    """(wall, CPU) of reading + splitting, parsing, and encoding the files' ``text`` fields, the
    encode with a new tokenizer, whose word cache starts empty as in the raw row."""
    import gigatoken

    tok = gigatoken.Tokenizer.from_json(GPT2.read_text(encoding="utf-8"))
    tok.encode_batch(["warm up"])  # as the raw row: the first call imports awkward
    read = clocked(lambda: [line for f in files for line in f.read_bytes().splitlines()])
    parse = clocked(lambda: [orjson.loads(line)["text"] for line in read[2]])
    texts = parse[2]
    encode = clocked(lambda: [tok.encode_batch(texts[i : i + BATCH]) for i in range(0, len(texts), BATCH)])
    return {"read": read[:2], "parse": parse[:2], "encode": encode[:2]}


def pt_corpus(description: str) -> tuple[list[Path], int]:
    """``--size-mb``, ``--chunk-mb`` and ``--repeat`` from the command line: (the pt files of that
    corpus, built unless a matching one is there, the repetitions)."""
    parser = argparse.ArgumentParser(description=description, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=int, default=400)
    parser.add_argument("--chunk-mb", type=int, default=10)
    parser.add_argument("--repeat", type=int, default=3)
    args = parser.parse_args()
    root = Path("bench/results") / f"corpus-{args.size_mb}mb-{args.chunk_mb}mb"
    return build(root, CorpusSpec(args.size_mb, args.chunk_mb)).files("pt"), args.repeat


def main() -> None:
    files, repeat = pt_corpus(__doc__)
    runs = [steps(files) for _ in range(repeat)]
    for k, run in enumerate(runs):
        print(f"round {k + 1}: " + ", ".join(f"{n} {w:.2f} s wall, {c:.2f} s CPU" for n, (w, c) in run.items()))
    best = {k: (min(r[k][0] for r in runs), min(r[k][1] for r in runs)) for k in runs[0]}
    cores = len(os.sched_getaffinity(0))
    for name, (wall, cpu) in best.items():
        print(f"{name:7s} wall {wall:5.2f} s  CPU {cpu:5.2f} s  (best of {repeat})")
    encode_wall = best["encode"][0]
    spread = sum(cpu for _, cpu in best.values()) / cores
    bound = max(encode_wall, best["parse"][1], spread)
    print(
        f"stage >= max(encode wall {encode_wall:.2f}, parse CPU {best['parse'][1]:.2f}, all CPU / {cores} cores {spread:.2f})"
    )
    print(
        f"        = {bound:.2f} s: at most {encode_wall / bound:.0%} of raw gigatoken's speed before writing anything"
    )


if __name__ == "__main__":
    main()
