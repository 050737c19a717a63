"""Touch most of this machine's free memory once, so later rows do not pay for its first touch.

    python bench/warm_memory.py [--share 0.75]

On a freshly booted VM of the kind these benchmarks run on (Firecracker, memory handed to the
guest as it is first touched), a page touched for the first time cost ~3 us: holding 18 GiB once
took 55 s, and writing a 400 MB job's 384 MB of token ids took 1.10 s the first time against
0.09-0.20 s once memory had been touched. Every new page pays it (page cache of the outputs,
fresh mappings for batches), so the stage rows of a bench run on a fresh VM come out up to ~1.5x
slower than the same code once memory is warm. The guest hands freed memory back to the host
within minutes (touched again 20 min after a first warm-up, it ran at the same ~350 MiB/s), so
run this right before a bench you will quote.
"""

from __future__ import annotations

import argparse
import time

import numpy as np
import psutil

GIB = 1 << 30


def warm(share: float) -> tuple[int, float]:
    """Hold ``share`` of the available memory at once, every page written; (GiB, seconds)."""
    gib = max(1, int(psutil.virtual_memory().available * share) // GIB)
    started, held = time.perf_counter(), []
    for _ in range(gib):
        held.append(np.ones(GIB, dtype=np.uint8))
    del held
    return gib, time.perf_counter() - started


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--share", type=float, default=0.75, help="share of the available memory to touch")
    args = parser.parse_args()
    if not 0 < args.share <= 0.9:
        parser.error("--share must be in (0, 0.9]")
    gib, seconds = warm(args.share)
    print(f"touched {gib} GiB in {seconds:.1f} s ({gib * 1024 / seconds:,.0f} MiB/s)")


if __name__ == "__main__":
    main()
