"""cache_flow: every JSONL chunk -> HDF5, in mapped tasks (one per chunk, or per group of small
chunks: flows/batching.py), each chunk cached on its content."""

from __future__ import annotations

import time

from prefect import flow
from prefect.logging import get_run_logger

from flows.batching import batches, shares_tasks, stamp_size
from flows.chunks import (
    ChunkOutcome,
    blame_upstream,
    in_order,
    output_matches,
    raise_failures,
    rebuild_bad_hits,
    run_batches,
    run_chunks,
    sweep_outputs,
)
from flows.commit import Committer
from flows.grouped import run_groups, runs_in_groups
from flows.layouts import retire_parts, stale_parts
from flows.params import CacheParams, RunOptions, redacted
from flows.plan import Plan, merged, plan_chunks, stamp_outputs
from flows.reporting import Progress, publish_cache_report, tail_warning, untrained_warning
from flows.run_record import save_run_record
from flows.runners import default_task_runner, run_here_or_on_runner
from flows.storage import result_storage_for
from pipeline_core.commit.lock import FolderLock
from pipeline_core.commit.quarantine import ErrorRateExceeded, error_rate_problem
from pipeline_core.processors.build import build_processor, load_tokenizer
from pipeline_core.stages.cache import CacheOptions
from pipeline_core.stages.encode_ahead import encode_width
from pipeline_core.stages.inputs import list_inputs
from pipeline_core.stages.outputs import check_unique_outputs, standing_output
from pipeline_core.storage.redact import protect_secrets
from tasks.cache import cache_chunk, cache_chunk_batch
from tasks.hashing import hash_chunk, hashed_here_or_by_task, with_stamp
from tasks.keys import digest
from tasks.models import CacheJob, ChunkResult
from tasks.retry import backoff_delays


def make_job(params: CacheParams) -> CacheJob:
    """Validate the whole config up front (tokenizer loads, processor builds) and freeze it."""
    tokenizer = load_tokenizer(params.tokenizer.spec())
    spec = params.processor_spec()
    processor = build_processor(spec, tokenizer)
    job = CacheJob(
        input_url=str(params.input),
        output_dir=params.output,
        tokenizer=params.tokenizer.spec().__dict__,
        processor=spec.to_dict(),
        tokenizer_fingerprint=tokenizer.fingerprint,
        processor_digest=digest(processor.describe()),
        pack_size=params.pack_size,
        pad_value=params.pad_value,
        packing=params.packing,
        bfd_window=params.bfd_window,
        output_format=params.output_format,
        split_sentences=params.split_sentences,
        on_error=params.on_error,
        max_error_rate=params.max_error_rate,
        max_row_bytes=params.max_row_bytes,
        batch_size=params.batch_size,
        batch_bytes=params.batch_bytes,
        compression=params.compression,
        position_ids=params.position_ids,
        endpoint=params.run.storage.endpoint_url,
    )
    CacheOptions(**job.cache_options())  # impossible combinations fail here, before any task
    return job


def check_error_rates(results, max_rate: float | None) -> None:
    """The limit is not part of the cache key, so cached and resumed chunks are held to it here too."""
    problems = [error_rate_problem(r.output_url, r.rows_skipped, r.rows_read, max_rate, r.skipped) for r in results]
    problems = [p for p in problems if p]
    if problems:
        raise ErrorRateExceeded("\n".join(problems))


class TooFewSamples(RuntimeError):
    """A run wrote fewer samples than ``min_samples`` (by default: none at all)."""


def check_min_samples(results, min_samples: int) -> None:
    """A run that writes nothing is almost always a wrong field, encoding or processor: it fails
    (before the commit) naming why rows were skipped, unless ``min_samples`` allows it."""
    written = sum(r.samples_written for r in results)
    if written >= min_samples:
        return
    reasons: dict[str, int] = {}
    for r in results:
        for reason, n in r.skipped.items():
            reasons[reason] = reasons.get(reason, 0) + n
    raise TooFewSamples(
        f"the run wrote {written} samples from {sum(r.rows_read for r in results)} rows, fewer than "
        f"min_samples={min_samples}; rows skipped by reason {dict(sorted(reasons.items()))} (see the "
        "*.errors.jsonl files). Fix the input or the processor settings, or pass min_samples=0"
    )


def rerun_plan(params: CacheParams, job: CacheJob, inputs: list[str], committer, storage: dict):
    """(each input's manifest entry or None, its output URL, the plan: reused or to do)."""
    earlier = committer.previous_by_input()
    committed = [earlier.get(u) for u in inputs]
    outputs = [
        standing_output(u, params.output, job.output_format, c and c["output_url"]) for u, c in zip(inputs, committed)
    ]
    return (
        committed,
        outputs,
        plan_chunks(inputs, outputs, committed, params.run.verify_hits, storage, params.run.trust_stamps),
    )


def chunk_inputs(value: str | list[str], storage: dict, limit: int | None = None) -> list[str]:
    """The JSONL chunks to cache (the first ``limit``); quarantine files (``*.errors.jsonl``) are never inputs, and no two
    inputs may share an output name (refused here, before anything is written)."""
    return all_inputs(value, storage)[:limit]


def all_inputs(value: str | list[str], storage: dict) -> list[str]:
    """Every JSONL chunk of ``value`` (see ``chunk_inputs``), with no limit."""
    inputs = [u for u in list_inputs(value, storage) if not u.endswith(".errors.jsonl")]
    check_unique_outputs(inputs)
    return inputs


def _run_batches(plan: Plan, groups, job, urls, committed, storage, progress, committer) -> ChunkOutcome:
    futures = [cache_chunk_batch.submit(job, [urls[k] for k in g], storage, [committed[k] for k in g]) for g in groups]

    def stamp(k: int, result: ChunkResult) -> None:
        result.source_stamp = plan.stamps[plan.todo[k]]  # taken before the batch read the bytes

    return run_batches(futures, groups, progress, committer, stamp)


def _run_todo(
    plan: Plan, task, job: CacheJob, inputs, committed, storage, progress, committer, run: RunOptions
) -> ChunkOutcome:
    """hash + cache tasks for the chunks the plan could not reuse; indices are positions in ``plan.todo``."""
    if not plan.todo:
        return ChunkOutcome()
    committer.begin()  # the folder is incomplete before any output is replaced
    urls, todo = [inputs[i] for i in plan.todo], [committed[i] for i in plan.todo]
    sizes = [stamp_size(plan.stamps[i]) for i in plan.todo]  # None where a chunk has no stamp
    grouped = runs_in_groups(run)
    if not grouped and (groups := batches(sizes, run.max_workers)) is not None:
        return _run_batches(plan, groups, job, urls, todo, storage, progress, committer)
    if grouped or shares_tasks(sizes, run.max_workers):
        return run_groups(plan, task, job, urls, todo, storage, progress, committer, run)
    digests, futures = [], []  # each chunk's task is submitted as soon as its digest is taken
    stamps = plan.todo_stamps(run.trust_stamps)
    for found, entry, stamp in zip(hashed_here_or_by_task(urls, storage, run.max_workers), todo, stamps):
        digests.append(found)
        futures.append(task.submit(job, with_stamp(found, stamp), storage, entry))

    def stamp(k: int, result: ChunkResult) -> None:
        result.source_stamp = plan.stamps[plan.todo[k]]  # taken before the chunk's bytes were hashed

    outcome = run_chunks(futures, urls, progress, committer, stamp)
    blame_upstream(outcome, digests)
    return outcome


@flow(name="h5pipe-cache", validate_parameters=True, result_serializer="json", task_runner=default_task_runner())
def cache_flow(params: CacheParams) -> dict:
    """Runs here with the default thread pool, or as a subflow on the runner ``params.run`` asks for."""
    return run_here_or_on_runner(params, cache_flow_on_runner, _cache_run)


@flow(name="h5pipe-cache-on-runner", validate_parameters=True, result_serializer="json")
def cache_flow_on_runner(params: CacheParams) -> dict:
    return _cache_run(params)


def _cache_run(params: CacheParams) -> dict:
    """One run at a time per output folder: the lock is held from before the settings check to
    after the final commit (pipeline_core/commit/lock.py)."""
    with FolderLock(params.output, params.run.storage.to_fsspec(), params.run.lock_timeout):
        return _cache_run_locked(params)


def _cache_run_locked(params: CacheParams) -> dict:
    started = time.perf_counter()
    logger = get_run_logger()
    storage = params.run.storage.to_fsspec()
    protect_secrets(storage)
    if params.val_size is not None or params.shuffle:  # split/permute first, then one run per split
        from flows.splits_flow import run_splits

        return run_splits(params, storage, _cache_run)
    job = make_job(params)
    listed = all_inputs(params.input, storage)
    inputs = listed[: params.limit]
    left_alone = set(listed[len(inputs) :])  # beyond a trial run's limit: their committed outputs stay
    stale = stale_parts(params, storage)  # an earlier split run's folders: refused unless overwrite
    sweep_outputs(params.output, storage, logger)
    committer = Committer.open(params.output, "cache", digest(job.settings()), params.overwrite, storage)
    committed, outputs, plan = rerun_plan(params, job, inputs, committer, storage)
    # H5PIPE_ENCODE_AHEAD as this process reads it, for workers elsewhere too
    job = job.model_copy(update={"encode_width": encode_width()})
    logger.info(
        "caching %d chunk(s) into %s with %s; %d unchanged since the manifest's run, reused without a task",
        len(inputs),
        params.output,
        params.processor,
        len(plan.reused),
    )
    task = cache_chunk.with_options(
        result_storage=result_storage_for(params.output, storage, params.run.result_storage),
        retries=params.run.retries,
        retry_delay_seconds=backoff_delays(params.run.retries, params.run.retry_delay),
    )
    progress = Progress(len(inputs), "h5pipe-cache-progress", f"chunks cached into {params.output}")
    progress.advance(len(plan.reused))
    ran = _run_todo(plan, task, job, inputs, committed, storage, progress, committer, params.run)
    outcome = merged(plan, ran)
    raise_failures(outcome, inputs)

    def rebuild(i: int) -> ChunkResult:
        result = task.with_options(refresh_cache=True).submit(job, hash_chunk(inputs[i], storage), storage).result()
        result.source_stamp = plan.stamps[i]
        return result

    rebuild_bad_hits(
        outcome,
        inputs,
        lambda result: output_matches(result, params.run.verify_hits, storage),
        rebuild,
        committer,
        logger,
    )
    results, cached = in_order(outcome, len(inputs))
    stamp_outputs(results, cached, committer, storage, listed=plan.reused_output_infos())
    check_error_rates(results, params.max_error_rate)
    check_min_samples(results, params.min_samples)
    summary = publish_cache_report(results, cached, params.output, time.perf_counter() - started, params.pack_size)
    for warning in (tail_warning(summary), untrained_warning(summary)):
        if warning:
            logger.warning(warning)
    save_run_record(
        params.output, "cache", redacted(params), summary, storage, tokenizer_fingerprint=job.tokenizer_fingerprint
    )
    removed = committer.commit(results, keep_inputs=left_alone)
    if removed:
        logger.info("removed %d output(s) whose input is gone: %s", len(removed), removed[:5])
    if retired := retire_parts(params, stale, storage):
        logger.info("removed %d file(s) of the splits of an earlier run: %s", len(retired), retired[:5])
    logger.info("cache done: %s", summary)
    return {"summary": summary, "chunks": [r.model_dump() for r in results], "cached": cached}
