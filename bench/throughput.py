"""h5pipe throughput benchmark: raw encoders, h5pipe's stages and the peers, on one corpus.

    python bench/throughput.py [--size-mb 40] [--chunk-mb 10] [--repeat 3] [--out bench/results]
                               [--memory] [--memory-mb 100,1024] [--memory-repeat 3]
                               [--rerun-mb 10,100] [--no-rerun]
                               [--only NAME,...] [--no-latest]

Builds the corpus (bench/corpus.py: stdlib sources + shared fixtures, no network), then runs
every row of bench/rows.py, each repetition in a fresh process (bench/runner.py), and writes
``{out}/run-{time}/`` with results.json, report.md, chart.png and the rows' logs; with
``--latest`` (the default) report.md and chart.png are also copied to bench/latest.md and
bench/latest.png. ``--memory`` adds the peak RSS of the pt cache stage on one chunk of each
``--memory-mb`` size, ``--memory-repeat`` fresh runs each; the cached-rerun part runs a 100-chunk job of each ``--rerun-mb`` size
through cache_flow twice; the whole-process rows (bench/whole.py and bench/chat_whole.py,
``--no-whole`` skips them) time ``h5pipe cache`` as a user runs it, sft/dpo beside a
``datasets.map`` script.
See bench/README.md for what each row means.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import time
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench import chat_whole, machine, report, whole  # noqa: E402
from bench.corpus import Corpus, CorpusSpec, build  # noqa: E402
from bench.rows import MEMORY, RERUN, ROWS, Row  # noqa: E402
from bench.runner import Result, measure, measure_rounds  # noqa: E402

BENCH = Path(__file__).resolve().parent
RERUN_CHUNKS = 100


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--size-mb", type=float, default=40, help="corpus size in MB of text")
    parser.add_argument("--chunk-mb", type=float, default=10, help="JSONL chunk size (the unit of parallel work)")
    parser.add_argument("--repeat", type=int, default=3, help="fresh-process runs per row; the best time is kept")
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    parser.add_argument("--only", help="comma-separated substrings: run only the rows whose name has one")
    parser.add_argument("--memory", action="store_true", help="also measure peak RSS on one large chunk")
    parser.add_argument("--memory-mb", default="100,1024", help="chunk sizes in MB for --memory")
    parser.add_argument(
        "--memory-repeat", type=int, default=3, help="fresh-process runs per --memory size; medians are compared"
    )
    parser.add_argument("--rerun-mb", default="10,100", help="sizes in MB of the 100-chunk cached-rerun jobs")
    parser.add_argument("--no-rerun", dest="rerun", action="store_false")
    parser.add_argument(
        "--no-whole", dest="whole", action="store_false", help="skip the whole-process rows (bench/whole.py)"
    )
    parser.add_argument("--no-table", dest="table", action="store_false", help="skip the throughput rows")
    parser.add_argument("--no-latest", dest="latest", action="store_false", help="do not update bench/latest.*")
    args = parser.parse_args(argv)
    if args.size_mb <= 0 or args.chunk_mb <= 0 or args.repeat < 1 or args.memory_repeat < 1:
        parser.error("--size-mb and --chunk-mb must be positive, --repeat and --memory-repeat at least 1")
    return args


def selected(rows: list[Row], only: str | None) -> tuple[list[Row], dict[str, str]]:
    """(the rows to run, {row: why it is skipped}) among the rows ``--only`` names."""
    if only:
        wanted = [w.strip() for w in only.split(",") if w.strip()]
        rows = [r for r in rows if any(w in r.name for w in wanted)]
    skipped = {r.name: why for r in rows if (why := missing(r))}
    for name, why in skipped.items():
        print(f"skipping {name}: {why}", flush=True)
    return [r for r in rows if r.name not in skipped], skipped


def missing(row: Row) -> str | None:
    """Why the row cannot run here, or None."""
    checkout = os.environ.get(row.needs_env or "", "")
    if row.needs_env and not (checkout and Path(checkout).is_dir()):
        return f"{row.needs_env} does not name a checkout (set {row.needs_env}=/path/to/checkout to run it)"
    if row.needs is None:
        return None
    try:
        __import__(row.needs)
    except ImportError:
        return f"{row.needs} is not installed (pip install -e .[bench])"
    return None


def _progress(i: int, name: str, outcome: float | str) -> None:
    print(f"    round {i + 1}: {name}: {outcome if isinstance(outcome, str) else f'{outcome:.2f} s'}", flush=True)


def run_rows(rows: list[Row], corpus: Corpus, run_dir: Path, repeat: int) -> list[Result]:
    """Every row's runs, in rounds (see runner.measure_rounds)."""
    started = time.perf_counter()
    wanted = [(row.name, max(repeat, row.runs)) for row in rows]
    results = measure_rounds(wanted, corpus.root, run_dir / "work", run_dir / "rows.log", _progress)
    for result in results:
        status = result.error or f"best {result.seconds:.2f} s of {[round(s, 2) for s in result.runs]}"
        print(f"  {result.name}: {status}", flush=True)
    print(
        f"  ({len(rows)} rows in {max((r for _, r in wanted), default=0)} rounds, {time.perf_counter() - started:.0f} s)"
    )
    return results


def run_memory(sizes: list[float], out: Path, run_dir: Path, repeat: int) -> list[dict]:
    found = []
    for size in sizes:
        # stationary: new words arrive at one rate all along, so the chunks differ only in length
        corpus = build(out / f"corpus-memory-{size:g}mb", CorpusSpec(size, size, stationary=True), shapes=("pt",))
        print(f"memory: {size:g} MB chunk ({corpus.text_bytes / 1e6:.0f} MB of text)", flush=True)
        r = measure(MEMORY, corpus.root, run_dir / "work", repeat, run_dir / "rows.log")
        found.append(
            {
                "chunk_mb": size,
                "rows": corpus.documents,
                "tokens": r.tokens,
                "seconds": r.seconds,
                "peak_rss": statistics.median(r.peaks) if r.peaks else 0,
                "peaks": r.peaks,
                "error": r.error,
            }
        )
        peaks = ", ".join(f"{p / report.MIB:,.0f}" for p in r.peaks)
        print(f"  peak RSS [{peaks}] MiB, best {r.seconds:.1f} s {r.error or ''}", flush=True)
    return found


def run_rerun(size_mb: float, out: Path, run_dir: Path) -> dict | None:
    spec = CorpusSpec(size_mb, size_mb / RERUN_CHUNKS, chunks=RERUN_CHUNKS)
    corpus = build(out / f"corpus-rerun-{size_mb:g}mb", spec, shapes=("pt",))
    print(f"cached rerun: {RERUN_CHUNKS} chunks, {corpus.text_bytes / 1e6:.1f} MB", flush=True)
    r = measure(RERUN.name, corpus.root, run_dir / "work", 1, run_dir / "rows.log")
    if r.error:
        print(f"  {r.error}", flush=True)
        return None
    rerun = {**r.detail, "chunk_kb": corpus.text_bytes / RERUN_CHUNKS / 1e3, "peak_rss": r.peak_rss}
    print(
        f"  cold {rerun['cold']:.2f} s, server settled {rerun.get('settle', 0):.2f} s later, warm {rerun['warm']:.2f} s",
        flush=True,
    )
    return rerun


def main(argv: list[str] | None = None) -> Path:
    args = parse_args(argv)
    args.out.mkdir(parents=True, exist_ok=True)
    run_dir = args.out / time.strftime("run-%Y%m%d-%H%M%S")
    run_dir.mkdir()
    about = machine.describe()
    print(f"{about['cpu']}, {about['cores']} cores, load {about['load_start']}", flush=True)
    spec = CorpusSpec(args.size_mb, args.chunk_mb)
    corpus = build(args.out / f"corpus-{args.size_mb:g}mb-{args.chunk_mb:g}mb", spec)
    print(f"corpus: {corpus.text_bytes / 1e6:.1f} MB, {corpus.documents:,} documents at {corpus.root}", flush=True)
    rows, skipped = selected(ROWS, args.only) if args.table else ([], {})
    results = run_rows(rows, corpus, run_dir, args.repeat)
    sizes = [float(s) for s in args.memory_mb.split(",")]
    memory = run_memory(sizes, args.out, run_dir, args.memory_repeat) if args.memory else []
    reruns = [run_rerun(float(mb), args.out, run_dir) for mb in args.rerun_mb.split(",")] if args.rerun else []
    wholes = whole.run(args.out, args.repeat, corpus.folder("pt")) if args.whole else None
    chats = chat_whole.run(corpus.root, args.out, args.repeat) if args.whole else None
    about["load_end"] = machine.load()
    summary = {
        "command": "python bench/throughput.py " + " ".join(sys.argv[1:] if argv is None else argv),
        "machine": about,
        "corpus": {
            **asdict(spec),
            "documents": corpus.documents,
            "text_bytes": corpus.text_bytes,
            "chunks": len(corpus.files("pt")),
        },
        "repeat": args.repeat,
        "rows": [asdict(r) for r in results],
        "skipped": skipped,
        "memory": memory,
        "reruns": [r for r in reruns if r],
        "whole": wholes,
        "chat_whole": chats,
    }
    table = report.lines(results)
    write_outputs(summary, table, run_dir)
    print(report.text_table(table), flush=True)
    if args.latest:
        shutil.copyfile(run_dir / "report.md", BENCH / "latest.md")
        if (run_dir / "chart.png").exists():
            shutil.copyfile(run_dir / "chart.png", BENCH / "latest.png")
    shutil.rmtree(run_dir / "work", ignore_errors=True)
    print(f"wrote {run_dir}", flush=True)
    return run_dir


def write_outputs(summary: dict, table: list[report.Line], run_dir: Path) -> None:
    (run_dir / "results.json").write_text(json.dumps(summary, indent=2, default=str))
    text = report.markdown(summary, table)
    if summary.get("whole"):
        raw = next((r["seconds"] for r in summary["rows"] if r["name"] == "tokenizers encode_batch"), None)
        text = text.rstrip("\n") + "\n\n" + whole.markdown(summary["whole"], raw)
    if summary.get("chat_whole"):
        text = text.rstrip("\n") + "\n\n" + chat_whole.markdown(summary["chat_whole"])
    (run_dir / "report.md").write_text(text)
    if any(line.tokens_per_second for line in table):
        about = summary["machine"]
        title = f"h5pipe benchmark, {summary['corpus']['text_bytes'] / 1e6:.0f} MB corpus, GPT-2, {about['cpu']} ({about['cores']})"
        report.chart(table, run_dir / "chart.png", title)


if __name__ == "__main__":
    main()
