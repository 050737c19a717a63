"""Peak memory of the cache stage's global shuffle (``pipeline_core.stages.splits``) as the data
grows with the bucket size fixed: it should follow the bucket, not the data.

    python bench/shuffle_memory.py --sizes-mb 32,128 --bucket-mb 8

Each size runs ``prepare_splits(shuffle=True, val_size=0.01)`` in a fresh process over synthetic
JSONL chunks and reports that process's peak RSS (``ru_maxrss``). Not a test: nothing is asserted.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time

ROW = '{"text": "%s", "id": %d}\n'


def write_chunks(folder: str, size_mb: int, chunk_mb: int = 16) -> list[str]:
    """Synthetic rows of ~200 bytes in chunks of ``chunk_mb``."""
    os.makedirs(folder, exist_ok=True)
    paths, row, written = [], 0, 0
    while written < size_mb << 20:
        path = os.path.join(folder, f"train_chunk_{len(paths)}.jsonl")
        with open(path, "w") as f:
            size = 0
            while size < chunk_mb << 20 and written + size < size_mb << 20:
                line = ROW % (f"document {row} " * 12, row)
                f.write(line)
                size += len(line)
                row += 1
        written += size
        paths.append(path)
    return paths


def child(inputs: list[str], out: str, bucket_mb: int) -> dict:
    from pipeline_core.stages.splits import SplitOptions, prepare_splits

    started = time.perf_counter()
    prepared = prepare_splits(
        inputs, out, SplitOptions(val_size=0.01, seed=7, shuffle=True, bucket_bytes=bucket_mb << 20)
    )
    return {
        "seconds": round(time.perf_counter() - started, 2),
        "rows": prepared.rows,
        "shards": {k: len(v) for k, v in prepared.shards.items()},
        "peak_rss_mb": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024, 1),
    }


def main(argv: list[str] | None = None) -> list[dict]:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sizes-mb", default="32,128")
    parser.add_argument("--bucket-mb", type=int, default=8)
    parser.add_argument("--child", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.child:
        inputs, out, bucket = args.child
        print(json.dumps(child(json.loads(inputs), out, int(bucket))))
        return []
    results = []
    with tempfile.TemporaryDirectory(prefix="h5pipe-shuffle-bench-") as tmp:
        for size in [int(s) for s in args.sizes_mb.split(",")]:
            inputs = write_chunks(os.path.join(tmp, f"in{size}"), size)
            cmd = [
                sys.executable,
                __file__,
                "--child",
                json.dumps(inputs),
                os.path.join(tmp, f"out{size}"),
                str(args.bucket_mb),
            ]
            run = subprocess.run(cmd, check=True, capture_output=True, text=True)
            result = {"data_mb": size, "bucket_mb": args.bucket_mb, **json.loads(run.stdout.strip().splitlines()[-1])}
            results.append(result)
            print(json.dumps(result))
    return results


if __name__ == "__main__":
    main()
