"""Tokens per second of the encode backends on ~20 MB of prose, chat data and code.

    python bench/backend_throughput.py [--megabytes 20] [--batch 1000] [--tokenizer PATH]

Rows: raw ``tokenizers.encode_batch_fast`` (ids left in Encoding objects), TokenizersBackend
(the same plus conversion to Ragged), raw ``gigatoken.encode_batch`` (awkward result) and
GigatokenBackend (the same plus conversion to Ragged). Each row runs two passes over the
same batches: pass 1 starts from a fresh tokenizer (cold caches, like a stream seen once),
pass 2 reuses it (warm caches). Each row runs in its own process, so no row inherits another's
warm thread pool or allocator state.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import gigatoken  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from bench.backend_corpus import fixture_strings, stdlib_documents  # noqa: E402
from pipeline_core.tokenizer.backends import TokenizersBackend  # noqa: E402
from pipeline_core.tokenizer.gigatoken import GigatokenBackend, without_special_added_tokens  # noqa: E402

GPT2 = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures" / "tokenizers" / "gpt2" / "tokenizer.json"
MB = 1 << 20


def corpus(total_bytes: int) -> list[str]:
    """The fixture corpora's strings, then stdlib documents, up to ``total_bytes``."""
    texts, size = [], 0
    for source in (fixture_strings(), stdlib_documents()):
        for text in source:
            texts.append(text)
            size += len(text.encode("utf-8"))
            if size >= total_bytes:
                return texts
    return texts


def time_passes(make: Callable[[], Callable[[list[str]], int]], batches: list[list[str]]) -> list[tuple[float, int]]:
    encode = make()
    results = []
    for _ in range(2):
        start, tokens = time.perf_counter(), 0
        for batch in batches:
            tokens += encode(batch)
        results.append((time.perf_counter() - start, tokens))
    return results


def contenders(tokenizer_json: str) -> dict[str, Callable[[], Callable[[list[str]], int]]]:
    def raw_tokenizers():
        tok = Tokenizer.from_str(tokenizer_json)
        tok.encode_special_tokens = True
        return lambda b: sum(len(e.ids) for e in tok.encode_batch_fast(b, add_special_tokens=False))

    def raw_gigatoken():
        tok = gigatoken.Tokenizer.from_json(without_special_added_tokens(tokenizer_json))
        return lambda b: int(tok.encode_batch(b).layout.offsets.data[-1])

    def backend(cls):
        return lambda: lambda b, be=cls(tokenizer_json): int(be.encode_batch(b).offsets[-1])

    return {
        "tokenizers encode_batch_fast (raw)": raw_tokenizers,
        "TokenizersBackend -> Ragged": backend(TokenizersBackend),
        "gigatoken encode_batch (raw awkward)": raw_gigatoken,
        "GigatokenBackend -> Ragged": backend(GigatokenBackend),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--tokenizer", default=str(GPT2))
    parser.add_argument("--megabytes", type=int, default=20)
    parser.add_argument("--batch", type=int, default=1000)
    parser.add_argument("--only", type=int, help="run one row (used by the parent process)")
    args = parser.parse_args()
    if args.only is None:
        for row in range(len(contenders("{}"))):
            subprocess.run([sys.executable, __file__, *sys.argv[1:], "--only", str(row)], check=True)
        return
    run_row(args)


def run_row(args: argparse.Namespace) -> None:
    texts = corpus(args.megabytes * MB)
    size = sum(len(t.encode("utf-8")) for t in texts) / MB
    batches = [texts[i : i + args.batch] for i in range(0, len(texts), args.batch)]
    if args.only == 0:
        print(f"{len(texts):,} texts, {size:.1f} MB, {len(batches)} batches of {args.batch}, {os.cpu_count()} cpus")
    name, make = list(contenders(Path(args.tokenizer).read_text(encoding="utf-8")).items())[args.only]
    passes = time_passes(make, batches)
    cells = "  ".join(
        f"pass {i + 1}: {tok / dt / 1e6:5.2f} M tok/s {size / dt:6.1f} MB/s" for i, (dt, tok) in enumerate(passes)
    )
    print(f"{name:38s} {passes[0][1]:>11,} tokens  {cells}", flush=True)


if __name__ == "__main__":
    main()
