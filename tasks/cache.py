"""cache_chunk: one JSONL chunk -> one HDF5, cached on the chunk's content."""

from __future__ import annotations

import threading
from collections import deque
from collections.abc import Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import closing, nullcontext
from functools import partial

from prefect import task
from prefect.cache_policies import NO_CACHE
from prefect.logging import get_run_logger

from pipeline_core.commit.stamps import stamp_now
from pipeline_core.commit.standing import still_stands
from pipeline_core.processors.build import ProcessorSpec, TokenizerSpec, build_processor, load_tokenizer
from pipeline_core.stages.cache import CacheOptions, cache_files, suits_one_thread
from pipeline_core.stages.input_stream import CacheInput
from pipeline_core.stages.outputs import standing_output
from pipeline_core.storage.hashing import file_digest
from tasks.hashing import part_files, stamped_digest
from tasks.keys import cache_chunk_key
from tasks.models import CacheJob, ChunkDigest, ChunkResult
from tasks.retry import chunk_retries

CHUNK_LINES = 10  # a task caching more chunks logs their lines together (ChunkLog)
# Tasks of tiny chunks in one process (the threads runner's) run one at a time: each is Python in
# one thread (cache_files' in_one_thread), and two at once only trade the GIL. 1,000 chunks of 4 KB
# took 15.2-15.7 s of flow with one worker and 18.7 s with two. Worker processes each have their own.
TINY_TURNS = threading.Lock()


@task(
    name="cache-chunk",
    cache_key_fn=cache_chunk_key,
    persist_result=True,
    result_serializer="json",
    **chunk_retries(),
)
def cache_chunk(
    job: CacheJob, chunk: ChunkDigest, storage_options: dict | None = None, committed: dict | None = None
) -> ChunkResult:
    """``committed``: this output's manifest entry from an earlier run, reused when it still verifies."""
    return cache_one(job, chunk, storage_options, committed)


@task(
    name="cache-chunk-batch",
    cache_policy=NO_CACHE,  # see flows/batching.py: the manifest is what a rerun trusts
    persist_result=False,
    **chunk_retries(),
)
def cache_chunk_batch(
    job: CacheJob, urls: list[str], storage_options: dict | None, committed: list[dict | None]
) -> list[ChunkResult]:
    """Small chunks in one task (flows/batching.py): each hashed, then cached as ``cache_chunk`` would.
    Tasks of tiny chunks (``suits_one_thread``) in one process take turns (``TINY_TURNS``)."""
    digests = [file_digest(url, storage_options) for url in urls]
    chunks = [ChunkDigest(url=url, sha256=d.sha256, size=d.size) for url, d in zip(urls, digests, strict=True)]
    with TINY_TURNS if suits_one_thread([c.size for c in chunks]) else nullcontext():
        return list(cache_many(job, chunks, storage_options, committed))


def cache_one(
    job: CacheJob, chunk: ChunkDigest, storage_options: dict | None = None, committed: dict | None = None
) -> ChunkResult:
    (result,) = cache_many(job, [chunk], storage_options, [committed])
    return result


def cache_many(
    job: CacheJob, chunks: list[ChunkDigest], storage_options: dict | None = None, committed: list[dict | None] = ()
) -> Iterator[ChunkResult]:
    """Each chunk's result, in order: reused from its ``committed`` manifest entry when that still
    verifies, else cached, the chunks to cache in one stream (``cache_files``: the next is read and
    encoded while the one before is written). A cached chunk's output is hashed in a thread while
    the stream writes the next, so its result comes when that one is written (or fails)."""
    committed = list(committed) or [None] * len(chunks)
    resumed = {
        k: ChunkResult.model_validate(e).model_copy(update={"resumed": True})
        for k, e in enumerate(committed)
        if e and _still_valid(e, job, chunks[k], storage_options)
    }
    for result in resumed.values():
        get_run_logger().info("%s: resumed from the manifest, not recomputed", result.output_url)
    todo = [c for k, c in enumerate(chunks) if k not in resumed]
    inputs = [_cache_input(c, storage_options) for c in todo]
    one_thread = suits_one_thread([c.size for c in todo])  # many inputs of a few KB
    fresh = cache_files(inputs, *_stage(job), storage_options, one_thread) if todo else _nothing()
    log = ChunkLog(len(todo))
    with closing(fresh), ThreadPoolExecutor(1, thread_name_prefix="h5pipe-output-hash") as hasher, log:
        hashed: deque[Future] = deque()  # at most one output hashed behind the stream
        for k in range(len(chunks)):
            if k in resumed:
                yield from _logged(hashed, log)
                yield resumed[k]
                continue
            try:
                stats = next(fresh)
            except Exception:
                yield from _logged(hashed, log)  # a finished chunk is still a result, for a retry to skip
                raise
            yield from _logged(hashed, log)
            hashed.append(hasher.submit(_result, stats, storage_options))
        yield from _logged(hashed, log)


def _logged(hashed: deque[Future], log: ChunkLog) -> Iterator[ChunkResult]:
    """The results waiting in ``hashed``, each handed to ``log`` in the task's thread (its run logger)."""
    while hashed:
        result = hashed.popleft().result()
        log.add(result)
        yield result


class ChunkLog:
    """The log lines of a task's cached chunks: one per chunk when the task has at most
    ``CHUNK_LINES`` to cache; beyond that, one per chunk that skipped rows and, when the task
    ends, one for all the others. A line costs ~3 ms through Prefect's console and API handlers:
    1,000 chunks of 4 KB spent 3 of their flow's 18 s logging one each. Every chunk's figures are
    in the manifest and the run's summary either way."""

    def __init__(self, to_cache: int) -> None:
        self.each = to_cache <= CHUNK_LINES
        self.quiet: list[ChunkResult] = []

    def add(self, result: ChunkResult) -> None:
        if self.each or result.rows_skipped:
            _log_result(result)
        else:
            self.quiet.append(result)

    def __enter__(self) -> ChunkLog:
        return self

    def __exit__(self, *_) -> None:
        quiet, self.quiet = self.quiet, []  # logged also when a later chunk failed: these are done
        if len(quiet) == 1:
            _log_result(quiet[0])
        elif quiet:
            outputs = f"{quiet[0].output_url} .. {quiet[-1].output_url} ({len(quiet)} chunks)"
            _log_line(outputs, sum(r.samples_written for r in quiet), 0, sum(r.seconds for r in quiet))


def _log_result(result: ChunkResult) -> None:
    _log_line(result.output_url, result.samples_written, result.rows_skipped, result.seconds)


def _log_line(outputs: str, samples: int, skipped: int, seconds: float) -> None:
    get_run_logger().info("%s: %d samples, %d skipped, %.1fs", outputs, samples, skipped, seconds)


def _nothing() -> Iterator:
    yield from ()


def _stage(job: CacheJob) -> tuple:
    """(output folder, processor, options) of ``cache_files`` for this job."""
    processor = build_processor(ProcessorSpec(**job.processor), load_tokenizer(TokenizerSpec(**job.tokenizer)))
    return job.output_dir, processor, CacheOptions(**job.cache_options())


def _cache_input(chunk: ChunkDigest, storage_options: dict | None = None) -> CacheInput:
    known = chunk.sha256 if chunk.stamp else None  # stamped: read once, checked by its stamp
    return CacheInput(chunk.url, known, partial(check_unchanged, chunk, storage_options=storage_options))


def _result(stats, storage_options: dict | None) -> ChunkResult:
    """The chunk's result with its output's stamp and sha256: read back whole, in a thread of its own
    (``cache_many``) while the stream writes the next chunk (hashlib releases the GIL)."""
    stats.output_url = stats.output_url or _megatron_index(stats)
    stamp, written = stamped_digest(stats.output_url, storage_options)
    parts = part_files(_part_urls(stats), storage_options)
    return ChunkResult(sha256=written.sha256, size=written.size, output_stamp=stamp, parts=parts, **_counts(stats))


def check_unchanged(chunk: ChunkDigest, read_sha256: str, storage_options: dict | None = None) -> None:
    """Refuse a chunk whose input changed between its hash and the end of its read: by the stamp
    taken before the hash when there is one, else by the sha256 the reader took."""
    if chunk.stamp:
        now = stamp_now(chunk.url, storage_options)
        if now != chunk.stamp:
            raise RuntimeError(
                f"{chunk.url} changed while it was being cached (stamp {chunk.stamp} -> {now}); run again"
            )
    elif read_sha256 != chunk.sha256:
        raise RuntimeError(
            f"{chunk.url} changed while it was being cached (sha256 {chunk.sha256[:12]} -> {read_sha256[:12]}); run again"
        )


def _part_urls(stats) -> list[str]:
    """The quarantine file and every Megatron .bin/.idx but the output itself."""
    megatron = [stats.megatron_prefixes[k] + ext for k in sorted(stats.megatron_prefixes) for ext in (".bin", ".idx")]
    return [u for u in [stats.errors_url, *megatron] if u and u != stats.output_url]


def _still_valid(committed: dict, job: CacheJob, chunk: ChunkDigest, storage_options: dict | None) -> bool:
    expected_url = standing_output(chunk.url, job.output_dir, job.output_format, committed.get("output_url"))
    if committed.get("source_sha256") != chunk.sha256 or committed.get("output_url") != expected_url:
        return False
    return still_stands(ChunkResult.model_validate(committed).files(), "sha256", storage_options)


def _megatron_index(stats) -> str:
    """Megatron-only output: the first key's .idx (published after its .bin) stands for the chunk."""
    key = sorted(stats.megatron_prefixes)[0]
    return stats.megatron_prefixes[key] + ".idx"


def _counts(stats) -> dict:
    d = stats.to_dict()
    keep = set(ChunkResult.model_fields) - {"sha256", "size"}
    return {k: v for k, v in d.items() if k in keep}
