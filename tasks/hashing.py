"""hash_chunk: the streamed sha256 of an input chunk, the basis of content-keyed caching."""

from __future__ import annotations

from collections.abc import Iterator

from prefect import task
from prefect.cache_policies import NO_CACHE

from pipeline_core.commit.stamps import stamp_now
from pipeline_core.storage.hashing import FileDigest, file_digest
from tasks.models import ChunkDigest, PartFile
from tasks.retry import is_transient, retry_on_transient

HASH_DELAYS = (1.0, 2.0, 4.0)  # seconds before each retry of a transient read failure


@task(
    name="hash-chunk",
    cache_policy=NO_CACHE,  # the hash must read the bytes every time
    persist_result=False,
    retries=len(HASH_DELAYS),
    retry_delay_seconds=list(HASH_DELAYS),
    retry_condition_fn=retry_on_transient,
    retry_jitter_factor=0.5,
)
def hash_chunk(url: str, storage_options: dict | None = None) -> ChunkDigest:
    return chunk_digest(url, storage_options)


def chunk_digest(url: str, storage_options: dict | None = None) -> ChunkDigest:
    found = file_digest(url, storage_options)
    return ChunkDigest(url=url, sha256=found.sha256, size=found.size)


def with_stamp(found, stamp: str | None):
    """``found`` (a ChunkDigest, or a hash_chunk future left as it is) carrying the input's stamp
    taken before it was hashed, so its cache task checks the stamp instead of hashing again."""
    return found.model_copy(update={"stamp": stamp}) if stamp and isinstance(found, ChunkDigest) else found


def stamped_digest(url: str, storage_options: dict | None = None) -> tuple[str | None, FileDigest]:
    """(stamp, digest) of a file a task has just published. The stamp is taken first, so while a
    later check finds the file with it, the bytes are the ones hashed here: a Prefect cache hit is
    then known to name this very file, not another run's of the same size (pipeline_core/commit/standing.py)."""
    stamp = stamp_now(url, storage_options)
    return stamp, file_digest(url, storage_options)


def part_files(urls: list[str], storage_options: dict | None = None) -> list[PartFile]:
    """Stamp, size and sha256 of the files a chunk published besides its output, for the commit record."""
    return [
        PartFile(url=u, sha256=d.sha256, size=d.size, stamp=stamp)
        for u in urls
        for stamp, d in [stamped_digest(u, storage_options)]
    ]


def hash_here(
    urls: list[str], storage_options: dict | None = None, threads: int = 2, delays: tuple[float, ...] = HASH_DELAYS
) -> list[ChunkDigest]:
    """``hash_chunk`` of each URL, run in this process without a task run each (hashlib releases
    the GIL); a transient I/O failure is retried after each of ``delays``, as the task would be."""
    return list(hash_in_order(urls, storage_options, threads, delays))


def hash_in_order(
    urls: list[str], storage_options: dict | None = None, threads: int = 2, delays: tuple[float, ...] = HASH_DELAYS
) -> Iterator[ChunkDigest]:
    """``hash_here``'s digests one by one, in order, each as soon as it and those before it are
    taken, so a caller can start on the first chunks while the later ones are hashed."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, threads)) as pool:
        yield from pool.map(lambda url: _digest_retrying(url, storage_options, delays), urls)


def hashed_here_or_by_task(urls: list[str], storage_options: dict | None = None, threads: int = 2) -> Iterator:
    """Per URL, in order: its ``ChunkDigest`` taken in this process (no task run), or, when that
    read fails, a ``hash_chunk`` future in its place, whose task run retries a transient fault and
    records a lasting one as that chunk's failure, exactly as when every chunk had a hash task."""
    from concurrent.futures import ThreadPoolExecutor

    with ThreadPoolExecutor(max(1, threads)) as pool:
        pending = [pool.submit(chunk_digest, url, storage_options) for url in urls]
        for url, found in zip(urls, pending):
            try:
                yield found.result()
            except Exception:
                yield hash_chunk.submit(url, storage_options)


def _digest_retrying(url: str, storage_options: dict | None, delays: tuple[float, ...]) -> ChunkDigest:
    import time

    for delay in (*delays, None):
        try:
            return chunk_digest(url, storage_options)
        except Exception as exc:
            if delay is None or not is_transient(exc):
                raise
            time.sleep(delay)
    raise AssertionError("unreachable")
