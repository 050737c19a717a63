"""Where a row's time goes: run it under py-spy and list the hottest lines.

    python bench/profile.py "h5pipe cache pt packed 2048" [--corpus DIR] [--rate 100] [--top 25]

Writes ``{out}/profile-{row}.speedscope.json`` (open it in speedscope) and prints, for the
samples under the row's measured call only (``--under``, default the h5pipe entry points), the
lines with the most *self* samples and the functions with the most *inclusive* samples, as
``file:line``. Native time (the Rust encoders) is charged to the Python line that called it.
"""

from __future__ import annotations

import argparse
import json
import shutil
import subprocess
import sys
from collections import Counter
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.runner import ROWS_SCRIPT, _slug, child_env  # noqa: E402

ENTRY_POINTS = ("cache_jsonl", "run_flow", "export_dataset")


def record(row: str, corpus: Path, out: Path, rate: int) -> Path:
    if shutil.which("py-spy") is None:
        raise SystemExit("py-spy is not installed: pip install py-spy")
    work = out / f"profile-work-{_slug(row)}"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    target = out / f"profile-{_slug(row)}.speedscope.json"
    command = [sys.executable, str(ROWS_SCRIPT), row, str(corpus), str(work), str(work / "result.json")]
    # --idle: a thread waiting on the native encoders' worker threads is busy for us, not idle
    spy = [
        "py-spy",
        "record",
        "--idle",
        "--rate",
        str(rate),
        "--subprocesses",
        "--format",
        "speedscope",
        "-o",
        str(target),
        "--",
    ]
    subprocess.run(spy + command, check=True, env=child_env(work), stdout=subprocess.DEVNULL)
    measured = json.loads((work / "result.json").read_text())
    tokens = f", {measured['tokens']:,} tokens" if measured["tokens"] is not None else ""
    print(f"{row}: {measured['seconds']:.2f} s measured{tokens} (under py-spy)")
    shutil.rmtree(work, ignore_errors=True)
    return target


def short(file: str) -> str:
    for marker in ("site-packages/", "/work/main/"):
        if marker in file:
            return file.split(marker, 1)[1]
    return file


OWN_CODE = ("pipeline_core/", "flows/", "tasks/")


def parse(profile: Path, under: tuple[str, ...]) -> tuple[Counter, Counter, Counter, float]:
    """Seconds sampled below ``under``: per running line (self), per function (inclusive) and per
    h5pipe line (the deepest frame in our own code, so time in numpy or json is charged to the
    line that called it), and in all."""
    data = json.loads(profile.read_text())
    frames = data["shared"]["frames"]
    own, inclusive, ours, total = Counter(), Counter(), Counter(), 0
    for thread in data["profiles"]:
        for stack, weight in zip(thread["samples"], thread["weights"]):
            names = [frames[i]["name"] for i in stack]
            start = next((k for k, name in enumerate(names) if name in under), None)
            if start is None:
                continue
            total += weight
            leaf = frames[stack[-1]]
            own[f"{short(leaf.get('file', '?'))}:{leaf.get('line', '?')} {leaf['name']}"] += weight
            for key in {f"{short(frames[i].get('file', '?'))} {frames[i]['name']}" for i in stack[start:]}:
                inclusive[key] += weight
            mine = [frames[i] for i in stack if short(frames[i].get("file", "")).startswith(OWN_CODE)]
            if mine:
                ours[f"{short(mine[-1]['file'])}:{mine[-1].get('line', '?')} {mine[-1]['name']}"] += weight
    return own, inclusive, ours, total


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("row")
    parser.add_argument("--corpus", type=Path, default=Path(__file__).resolve().parent / "results" / "corpus-40mb-10mb")
    parser.add_argument("--out", type=Path, default=Path(__file__).resolve().parent / "results")
    parser.add_argument("--rate", type=int, default=100)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--under", default=",".join(ENTRY_POINTS), help="count only samples below these functions")
    args = parser.parse_args()
    under = tuple(args.under.split(","))
    own, inclusive, ours, total = parse(record(args.row, args.corpus, args.out, args.rate), under)
    print(f"{total:.2f} s sampled under {', '.join(under)}")
    print("\nself time (the line that was running):")
    for key, n in own.most_common(args.top):
        print(f"  {n / total:6.1%} {n:7.2f} s  {key}")
    print("\nby h5pipe line (library time charged to the h5pipe line that called it):")
    for key, n in ours.most_common(args.top):
        print(f"  {n / total:6.1%} {n:7.2f} s  {key}")
    print("\ninclusive time (the function and what it called):")
    for key, n in inclusive.most_common(args.top):
        print(f"  {n / total:6.1%} {n:7.2f} s  {key}")


if __name__ == "__main__":
    main()
