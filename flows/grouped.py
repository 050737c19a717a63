"""Chunks on worker runners (``processes``, Dask): hashed here, then one group task per worker.

A task run in a worker process costs far more than in a thread (the parameters and the task are
pickled, the run context is rebuilt, the worker reports its states over HTTP), and one task per
chunk for hashing plus one for caching made ``processes`` 0.55x and Dask 0.46x of threads on
40 chunks of 10 MB. Here the flow hashes the chunks itself (sha256 streams at hundreds of MB/s),
in order, and submits ``max_workers`` group tasks of about equal bytes (flows/batching.py
``worker_groups``), each as soon as its chunks are hashed when the inputs' sizes are known from
their stamps (the first group starts after its own bytes are hashed, not after the whole input's);
each chunk keeps its Prefect cache key, result record and manifest entry (tasks/cache_group.py).
On threads, chunks of 4-128 MB go the same way in groups of about 128 MB (flows/batching.py
``task_groups``), whose task runs cost the server far less than one per chunk.
"""

from __future__ import annotations

from flows.batching import stamp_size, task_groups, worker_groups
from flows.chunks import ChunkOutcome, run_batches
from flows.params import RunOptions
from tasks.cache_group import cache_chunk_group
from tasks.hashing import hash_in_order, with_stamp
from tasks.retry import backoff_delays


def runs_in_groups(run: RunOptions) -> bool:
    """Group tasks for every runner but threads, Dask's in-process workers included: there, two
    task runs per chunk took 14.8 s on 400 MB of 10 MB chunks against 8.6 s for threads, and one
    group task per worker 6.9 s against 7.8 s (bench/throughput.py, one sitting each)."""
    return run.task_runner != "threads"


def run_groups(plan, cache_task, job, urls, committed, storage, progress, committer, run: RunOptions) -> ChunkOutcome:
    """Cache ``urls`` (positions ``plan.todo``) in group tasks: one per worker on worker runners,
    groups of about TASK_BYTES on threads (flows/batching.py ``task_groups``). ``cache_task`` is
    the flow's configured ``cache_chunk``, whose result storage the groups share."""
    delays = tuple(backoff_delays(run.retries, run.retry_delay))
    stamps = plan.todo_stamps(run.trust_stamps)
    digests = (with_stamp(d, stamp) for d, stamp in zip(hash_in_order(urls, storage, run.max_workers, delays), stamps))
    sizes = [stamp_size(plan.stamps[i]) for i in plan.todo]
    if None in sizes:  # no size before the hash: take every digest first
        digests = iter(taken := list(digests))
        sizes = [d.size for d in taken]
    groups = (worker_groups if runs_in_groups(run) else task_groups)(sizes, run.max_workers)
    task = cache_chunk_group.with_options(retries=run.retries, retry_delay_seconds=list(delays))

    def stamp(k: int, result) -> None:
        result.source_stamp = plan.stamps[plan.todo[k]]  # taken before the flow read the bytes

    futures = []  # each group submitted once its chunks are hashed, while the later ones are
    try:
        for g in groups:
            chunks = [next(digests) for _ in g]
            futures.append(
                task.with_options(task_run_name=group_name(urls, g)).submit(
                    job, chunks, storage, [committed[k] for k in g], cache_task.result_storage
                )
            )
    except Exception:  # a hash failed for good: the groups already running still finish and commit
        run_batches(futures, groups[: len(futures)], progress, committer, stamp, hits=True)
        raise
    return run_batches(futures, groups, progress, committer, stamp, hits=True)


def group_name(urls: list[str], group: list[int]) -> str:
    """The group's task run name in the UI: its first and last chunk's file names."""
    first, last = (urls[group[i]].rstrip("/").rsplit("/", 1)[-1] for i in (0, -1))
    return f"cache {first}" if len(group) == 1 else f"cache {first} .. {last} ({len(group)} chunks)"
