"""Peak RSS of caching a file of bad lines vs a file of good lines of the same size (issue 17).

    python bench/quarantine_memory.py                 # 2,000,000 bad lines (4 MB) vs 4 MB of text rows
    python bench/quarantine_memory.py --lines 200000  # smaller

Each file is cached (pt, GPT-2) in its own process, so each peak is that run's alone; the
quarantine file of the bad one holds every line. The two peaks should be within ~10%: rejected
rows are streamed to disk, not held in memory. Not a test: the numbers go to the report.

Measured (2 cores, GPT-2): before streaming 914 MB vs 169 MB (5.4x); after 167 MB vs 169 MB (0.99).
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
GPT2 = ROOT.parent / "shared" / "fixtures" / "tokenizers" / "gpt2" / "tokenizer.json"


def write_inputs(folder: Path, lines: int) -> tuple[Path, Path]:
    bad, good = folder / "bad.jsonl", folder / "good.jsonl"
    bad.write_bytes(b"x\n" * lines)  # 2 bytes a line, none of them JSON
    size, row, written = bad.stat().st_size, 0, 0
    with open(good, "w", encoding="utf-8") as f:
        while written < size:
            line = json.dumps({"text": f"document {row} " + "lorem ipsum dolor sit amet " * 3}) + "\n"
            f.write(line)
            written += len(line)
            row += 1
    return bad, good


def peak_rss_mb(input_path: Path, out: Path, tokenizer: Path = GPT2) -> float:
    code = (
        "import resource, sys; sys.path.insert(0, sys.argv[3]);"
        "from pipeline_core import AutoTokenizer, cache_file;"
        "from pipeline_core.processors.pt import PretrainProcessor;"
        "tok = AutoTokenizer.from_file(sys.argv[4], eos_token='<|endoftext|>');"
        "s = cache_file(sys.argv[1], sys.argv[2], PretrainProcessor(tok));"
        "print(s.rows_read, s.samples_written, s.rows_skipped, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)"
    )
    done = subprocess.run(
        [sys.executable, "-c", code, str(input_path), str(out), str(ROOT), str(tokenizer)],
        capture_output=True,
        text=True,
        check=True,
    )
    rows, samples, skipped, rss_kb = map(int, done.stdout.split())
    print(
        f"  {input_path.name}: {rows} rows, {samples} samples, {skipped} quarantined, peak RSS {rss_kb / 1024:.0f} MB"
    )
    return rss_kb / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lines", type=int, default=2_000_000)
    parser.add_argument("--tokenizer", type=Path, default=GPT2, help="a tokenizer.json (default: the GPT-2 fixture)")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="h5pipe-bench-quarantine-") as tmp:
        bad, good = write_inputs(Path(tmp), args.lines)
        print(f"{bad.stat().st_size / 1e6:.1f} MB each; peak RSS per run:")
        bad_mb, good_mb = (
            peak_rss_mb(bad, Path(tmp) / "out-bad", args.tokenizer),
            peak_rss_mb(good, Path(tmp) / "out-good", args.tokenizer),
        )
        print(f"bad / good = {bad_mb / good_mb:.2f}")


if __name__ == "__main__":
    main()
