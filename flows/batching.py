"""Small chunks share a task: a Prefect task run costs ~70-130 ms of API calls and state
changes (measured on 2 busy cores), which is most of the time of a chunk of a few KB.

When every chunk left to do is under SMALL_CHUNK_BYTES and there are more than two per worker,
the cache flow groups them, in order, into batches of at most BATCH_CHUNKS chunks and
BATCH_BYTES bytes, at least two batches per worker so the runner stays busy. One batch task
hashes and caches its chunks one after another (tasks/cache.py ``cache_chunk_batch``); the
manifest records each chunk as before, so a rerun reuses them chunk by chunk (flows/plan.py).
Batch tasks have no Prefect result cache of their own: the manifest plan and the tasks' manifest
resume are what a rerun trusts.

Chunks of 4 MB and more, but under TASK_BYTES, share task runs too (``task_groups``). A chunk
task run costs the server ~25 ms of CPU and the flow ~10 ms (42 task runs for 400 MB of 10 MB
chunks took 1.0 s more server CPU than 2 group runs, measured with psutil on the server process),
which on 2 cores is the work of a few MB of pt text. Those chunks go, in order, into group task
runs of about TASK_BYTES each (tasks/cache_group.py), a multiple of the workers in number so that
the last round keeps every worker busy. Each chunk keeps its own Prefect cache entry and manifest
entry, as with one task run per chunk. A chunk of TASK_BYTES or more keeps a task run of its own.

Why 128 MiB: each group is a stream of its own (a read-ahead and an encode thread that fill and
drain), and fewer, longer streams ran faster. The bench's flow row, pt packed 2048, 2 workers,
alternated in both orders (AMD EPYC, 2026-12-08): 400 MB 1.00-1.12x (median ~1.06x) and 2 GB
1.03-1.11x against 64 MiB groups, with equal or lower peak RSS; 1 GiB groups at 2 GB 1.07-1.09x.
Past 128 MiB the gain grows little while progress moves, retries run and a failing chunk leaves
undone in ever larger steps (docs/performance.md, "Chunks: how big").
"""

from __future__ import annotations

import re

SMALL_CHUNK_BYTES = 4 << 20
BATCH_BYTES = 64 << 20
BATCH_CHUNKS = 100
TASK_BYTES = 128 << 20


def stamp_size(stamp: str | None) -> int | None:
    """The size in an input's stamp (``size=N:...``, pipeline_core/commit/stamps.py), or None."""
    found = re.match(r"size=(\d+)", stamp or "")
    return int(found.group(1)) if found else None


def batches(sizes: list[int | None], workers: int) -> list[list[int]] | None:
    """Positions of ``sizes`` grouped into batch tasks, or None when each chunk keeps its own task."""
    if len(sizes) <= 2 * workers or any(s is None or s >= SMALL_CHUNK_BYTES for s in sizes):
        return None
    per_batch = max(1, min(BATCH_CHUNKS, len(sizes) // (2 * workers)))
    groups: list[list[int]] = [[]]
    held = 0
    for k, size in enumerate(sizes):
        if groups[-1] and (len(groups[-1]) >= per_batch or held + size > BATCH_BYTES):
            groups.append([])
            held = 0
        groups[-1].append(k)
        held += size
    return groups


def worker_groups(sizes: list[int], workers: int) -> list[list[int]]:
    """Positions of ``sizes`` cut, in order, into at most ``workers`` groups of about equal bytes:
    one task run per worker process (tasks/cache_group.py), whatever the chunks' sizes."""
    total, held, groups = sum(sizes), 0, [[]]
    for k, size in enumerate(sizes):
        if groups[-1] and len(groups) < workers and held >= total * len(groups) / workers:
            groups.append([])
        groups[-1].append(k)
        held += size
    return [g for g in groups if g]


def shares_tasks(sizes: list[int | None], workers: int) -> bool:
    """Do these chunks go into group task runs (``task_groups``)? Only when every size is known,
    each is under TASK_BYTES, there are more than two chunks per worker, and the groups are fewer
    than the chunks."""
    if len(sizes) <= 2 * workers or any(s is None or s >= TASK_BYTES for s in sizes):
        return False
    return len(task_groups(sizes, workers)) < len(sizes)  # else a group per chunk: nothing saved


def task_groups(sizes: list[int], workers: int) -> list[list[int]]:
    """Positions of ``sizes`` cut, in order, into groups of about TASK_BYTES, ``workers`` times
    the rounds needed (at most one group per chunk), of about equal bytes."""
    rounds = max(1, -(-sum(sizes) // (workers * TASK_BYTES)))
    return worker_groups(sizes, min(len(sizes), workers * rounds))
