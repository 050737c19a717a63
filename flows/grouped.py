"""Chunks on worker runners (``processes``, Dask): hashed here, then one group task per worker.

A task run in a worker process costs far more than in a thread (the parameters and the task are
pickled, the run context is rebuilt, the worker reports its states over HTTP), and one task per
chunk for hashing plus one for caching made ``processes`` 0.55x and Dask 0.46x of threads on
40 chunks of 10 MB. Here the flow hashes the chunks itself (sha256 streams at hundreds of MB/s)
and submits ``max_workers`` group tasks of about equal bytes (flows/batching.py ``worker_groups``);
each chunk keeps its Prefect cache key, result record and manifest entry (tasks/cache_group.py).
On threads, chunks of 4-64 MB go the same way in groups of about 64 MB (flows/batching.py
``task_groups``), whose task runs cost the server far less than one per chunk.
"""

from __future__ import annotations

from flows.batching import task_groups, worker_groups
from flows.chunks import ChunkOutcome, run_batches
from flows.params import RunOptions
from tasks.cache_group import cache_chunk_group
from tasks.hashing import hash_here, with_stamp
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
    digests = hash_here(urls, storage, run.max_workers, tuple(backoff_delays(run.retries, run.retry_delay)))
    digests = [with_stamp(d, stamp) for d, stamp in zip(digests, plan.todo_stamps(run.trust_stamps))]
    cut = worker_groups if runs_in_groups(run) else task_groups
    groups = cut([d.size for d in digests], run.max_workers)
    task = cache_chunk_group.with_options(
        retries=run.retries, retry_delay_seconds=backoff_delays(run.retries, run.retry_delay)
    )
    futures = [
        task.with_options(task_run_name=group_name(urls, g)).submit(
            job, [digests[k] for k in g], storage, [committed[k] for k in g], cache_task.result_storage
        )
        for g in groups
    ]

    def stamp(k: int, result) -> None:
        result.source_stamp = plan.stamps[plan.todo[k]]  # taken before the flow read the bytes

    return run_batches(futures, groups, progress, committer, stamp, hits=True)


def group_name(urls: list[str], group: list[int]) -> str:
    """The group's task run name in the UI: its first and last chunk's file names."""
    first, last = (urls[group[i]].rstrip("/").rsplit("/", 1)[-1] for i in (0, -1))
    return f"cache {first}" if len(group) == 1 else f"cache {first} .. {last} ({len(group)} chunks)"
