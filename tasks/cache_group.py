"""cache_chunk_group: a worker's share of the chunks in one task run, each cached as cache_chunk is.

With worker processes (``processes``, Dask) each task run costs a round of pickling, context
hydration and API calls in the worker, and the flow used to pay two per chunk (hash, cache). So
the flow hashes the chunks itself and hands each worker one group (flows/batching.py
``worker_groups``). Inside the group every chunk keeps its own Prefect cache entry: the key is
``cache_chunk_key`` of the same parameters, read from and written to the result store that
``cache_chunk`` uses, in the same record format. A run with threads after a run with processes
finds every chunk cached, and the other way round; a retried group skips the chunks it finished.
"""

from __future__ import annotations

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.results import ResultStore, get_result_store
from prefect.settings import PREFECT_TASKS_REFRESH_CACHE

from tasks.cache import cache_chunk, cache_many
from tasks.keys import cache_chunk_key
from tasks.models import CacheJob, ChunkDigest, ChunkResult
from tasks.retry import chunk_retries


@task(
    name="cache-chunk-group",
    cache_policy=NO_CACHE,  # each chunk is cached under its own key, below
    persist_result=False,
    **chunk_retries(),
)
def cache_chunk_group(
    job: CacheJob,
    chunks: list[ChunkDigest],
    storage_options: dict | None,
    committed: list[dict | None],
    result_storage=None,
) -> list[tuple[ChunkResult, bool]]:
    """(result, was it a cache hit) per chunk, in order; ``result_storage`` is cache_chunk's. The
    chunks that are not hits are cached in one stream (tasks/cache.py ``cache_many``), each result
    stored under its key as soon as it is ready, so a retried group skips the chunks it finished."""
    store = chunk_result_store(result_storage)
    keys = [cache_chunk_key(None, {"job": job, "chunk": c}) for c in chunks]
    done = {k: (store.read(key).result, True) for k, key in enumerate(keys) if is_cached(store, key)}
    misses = [k for k in range(len(chunks)) if k not in done]
    results = cache_many(job, [chunks[k] for k in misses], storage_options, [committed[k] for k in misses])
    for k, result in zip(misses, results, strict=True):
        store.write(result, key=keys[k])
        done[k] = (result, False)
    return [done[k] for k in range(len(chunks))]


def chunk_result_store(result_storage=None) -> ResultStore:
    """The result store a ``cache_chunk`` run with this result storage reads and writes."""
    return get_result_store().update_for_task(cache_chunk.with_options(result_storage=result_storage), _sync=True)


def is_cached(store: ResultStore, key: str) -> bool:
    return not PREFECT_TASKS_REFRESH_CACHE.value() and store.exists(key)
