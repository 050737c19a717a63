"""Does encoding a long stream of varied text grow RSS without bound? Prints RSS as it goes.

    python bench/backend_memory.py                      # gigatoken, default cache bound
    python bench/backend_memory.py --reset-every-chars 0   # gigatoken, never rebuilt
    python bench/backend_memory.py --backend tokenizers  # the reference, for comparison

Each run encodes ``--megabytes`` of text (this Python's stdlib sources cycled, mixed with random
unicode words so the pretoken cache keeps meeting new pretokens) in batches of ``--batch``
documents and prints the process RSS every ``--every`` MB. Run one configuration per process so
the numbers do not include another run's memory.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import psutil

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.backend_corpus import batches  # noqa: E402
from pipeline_core.tokenizer.backends import TokenizersBackend  # noqa: E402
from pipeline_core.tokenizer.gigatoken import DEFAULT_RESET_EVERY_CHARS, GigatokenBackend  # noqa: E402

GPT2 = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "tokenizers" / "gpt2" / "tokenizer.json"
MB = 1 << 20


def build(args: argparse.Namespace):
    tokenizer_json = Path(args.tokenizer).read_text(encoding="utf-8")
    if args.backend == "tokenizers":
        return TokenizersBackend(tokenizer_json)
    return GigatokenBackend(tokenizer_json, reset_every_chars=args.reset_every_chars or None)


def run(args: argparse.Namespace) -> None:
    process = psutil.Process()
    backend = build(args)
    reset = getattr(backend, "_reset_every", None)
    print(
        f"backend={args.backend} reset_every_chars={reset} random_share={args.random_share} start rss={process.memory_info().rss / MB:.0f} MB"
    )
    encoded = tokens = 0
    next_report, peak, busy = args.every, 0.0, 0.0
    for batch in batches(args.megabytes * MB, args.batch, args.random_share):
        start = time.perf_counter()
        tokens += int(backend.encode_batch(batch).offsets[-1])
        busy += time.perf_counter() - start
        encoded += sum(len(t.encode("utf-8")) for t in batch)
        rss = process.memory_info().rss / MB
        peak = max(peak, rss)
        if encoded >= next_report * MB:
            print(
                f"{encoded / MB:7.0f} MB encoded  rss {rss:6.0f} MB  tokens {tokens:>11,}  resets {getattr(backend, 'resets', 0)}  encode {busy:6.1f} s",
                flush=True,
            )
            next_report += args.every
    print(
        f"done: {encoded / MB:.0f} MB, {tokens:,} tokens in {busy:.1f} s of encoding ({encoded / MB / busy:.0f} MB/s), "
        f"peak rss {peak:.0f} MB, final rss {process.memory_info().rss / MB:.0f} MB"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--backend", choices=("gigatoken", "tokenizers"), default="gigatoken")
    parser.add_argument("--reset-every-chars", type=int, default=DEFAULT_RESET_EVERY_CHARS, help="0 = never rebuild")
    parser.add_argument("--tokenizer", default=str(GPT2))
    parser.add_argument("--megabytes", type=int, default=200)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--every", type=int, default=20, help="report every N MB")
    parser.add_argument("--random-share", type=float, default=0.4, help="share of random-word documents")
    run(parser.parse_args())


if __name__ == "__main__":
    main()
