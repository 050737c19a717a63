"""export_flow: a dataset -> JSONL chunks, one mapped task per chunk, cached on the data."""

from __future__ import annotations

import time

from prefect import flow, unmapped
from prefect.artifacts import create_markdown_artifact, create_table_artifact
from prefect.logging import get_run_logger

from flows.chunks import (
    ChunkOutcome,
    in_order,
    output_matches,
    raise_failures,
    rebuild_bad_hits,
    run_chunks,
    sweep_outputs,
)
from flows.commit import Committer
from flows.params import ExportParams, redacted
from flows.plan import Plan, merged, plan_exports, stamp_outputs
from flows.reporting import Progress, summary_markdown
from flows.run_record import save_run_record
from flows.runners import default_task_runner, run_here_or_on_runner
from flows.storage import result_storage_for
from pipeline_core.commit.lock import FolderLock
from pipeline_core.stages.export import chunk_count, remove_stale_chunks
from pipeline_core.stages.process_func import load_process_func, source_hash
from pipeline_core.storage.fs import url_to_fs
from pipeline_core.storage.redact import protect_secrets
from tasks.export import export_chunk_task, export_stream_task
from tasks.keys import digest
from tasks.models import ExportChunkResult, ExportJob
from tasks.retry import backoff_delays


def export_job(params: ExportParams) -> ExportJob:
    """The run's settings (the process_func imported and hashed), without opening the source."""
    return ExportJob(
        source=params.source,
        output_dir=params.output,
        prefix=params.prefix,
        chunk_size=params.chunk_size,
        split=params.split,
        streaming=params.streaming,
        seed=params.seed,
        process_func=params.process_func,
        process_func_version=params.process_func_version,
        on_error=params.on_error,
        process_func_hash=source_hash(load_process_func(params.process_func), params.process_func_version),
        source_kwargs=params.source_options(),
    )


def make_export_job(params: ExportParams, storage: dict) -> tuple[ExportJob, object]:
    job = export_job(params)
    from pipeline_core.sources import open_source

    # a copy: datasets.load_dataset adds keys to the storage_options it is given
    source = open_source(
        params.source,
        split=params.split,
        streaming=params.streaming,
        seed=params.seed,
        storage_options=dict(storage) or None,
        **params.source_options(),
    )
    job.source_fingerprint = source.fingerprint
    return job, source


def export_totals(results: list[ExportChunkResult], cached: list[bool], source) -> dict:
    failed: dict[str, int] = {}
    datasets: dict[str, int] = {}
    for r in results:
        for k, v in r.failed.items():
            failed[k] = failed.get(k, 0) + v
        for k, v in r.dataset_rows.items():
            datasets[k] = datasets.get(k, 0) + v
    return {
        "chunks": len(results),
        "cached_chunks": sum(cached),
        "rows_in": sum(r.rows_in for r in results),
        "rows_out": sum(r.rows_out for r in results),
        "rows_filtered": sum(r.rows_filtered for r in results),
        "rows_failed": sum(r.rows_failed for r in results),
        "failed_by_reason": dict(sorted(failed.items())),
        "rows_by_dataset": dict(sorted(datasets.items())),
        "datasets": {name: _dataset_counts(counts, datasets, results) for name, counts in source.summary().items()},
        **_not_loadable(source),
    }


def _not_loadable(source) -> dict:
    """dataset_info entries left unselected that h5pipe could not load, with the reason (if any)."""
    skipped = getattr(getattr(source, "source", source), "not_loadable", None)
    return {"datasets_not_loadable": dict(sorted(skipped.items()))} if skipped else {}


def _dataset_counts(counts, rows_read: dict[str, int], results: list[ExportChunkResult]) -> dict:
    """The source's planned counts, with what the chunks actually read filled in."""
    d = counts.to_dict()
    d["rows_read"] = rows_read.get(counts.name, 0)
    d.pop("rows_failed", None)  # per-dataset failures are in the chunks' errors files
    return d


@flow(name="h5pipe-export", validate_parameters=True, result_serializer="json", task_runner=default_task_runner())
def export_flow(params: ExportParams) -> dict:
    """Runs here with the default thread pool, or as a subflow on the runner ``params.run`` asks for."""
    return run_here_or_on_runner(params, export_flow_on_runner, _export_run)


@flow(name="h5pipe-export-on-runner", validate_parameters=True, result_serializer="json")
def export_flow_on_runner(params: ExportParams) -> dict:
    return _export_run(params)


def _export_run(params: ExportParams) -> dict:
    """One run at a time per output folder (see cache_flow._cache_run)."""
    with FolderLock(params.output, params.run.storage.to_fsspec(), params.run.lock_timeout):
        return _export_run_locked(params)


def _export_run_locked(params: ExportParams) -> dict:
    started = time.perf_counter()
    logger = get_run_logger()
    storage = params.run.storage.to_fsspec()
    protect_secrets(storage)
    job, source = make_export_job(params, storage)
    fs, root = url_to_fs(params.output, storage)
    fs.makedirs(root, exist_ok=True)
    sweep_outputs(params.output, storage, logger)
    committer = Committer.open(params.output, "export", digest(job.settings()), params.overwrite, storage)
    options = dict(
        result_storage=result_storage_for(params.output, storage, params.run.result_storage),
        retries=params.run.retries,
        retry_delay_seconds=backoff_delays(params.run.retries, params.run.retry_delay),
    )
    if source.num_rows is None:
        committer.begin()  # the folder is incomplete before any chunk is replaced
        results, cached = _run_stream(job, storage, options)
        for r in results:
            committer.record(r)
    else:
        n = chunk_count(source.num_rows, params.chunk_size)
        plan = plan_exports(job, n, committer.previous(), storage, params.run.trust_stamps)
        logger.info(
            "exporting %d chunk(s) into %s; %d unchanged since the manifest's run, reused without a task",
            n,
            params.output,
            len(plan.reused),
        )
        results, cached = _run_mapped(job, storage, options, plan, committer, params.run.verify_hits)
        stamp_outputs(results, cached, committer, storage, listed=plan.reused_output_infos())
    summary = export_totals(results, cached, source)
    summary["seconds"] = round(time.perf_counter() - started, 3)
    create_table_artifact(
        table=[r.model_dump(exclude={"dataset_rows", "failed"}) for r in results], key="h5pipe-export-chunks"
    )
    create_markdown_artifact(markdown=summary_markdown("export", summary, params.output), key="h5pipe-export-summary")
    save_run_record(
        params.output, "export", redacted(params), summary, storage, source_fingerprint=job.source_fingerprint
    )
    removed = committer.commit(results) + remove_stale_chunks(
        params.output, job.prefix, [r.output_url for r in results], storage
    )
    if removed:
        logger.info("removed %d file(s) of an earlier, larger export: %s", len(removed), removed[:5])
    logger.info("export done: %s", summary)
    return {
        "summary": summary,
        "chunks": [r.model_dump() for r in results],
        "cached": cached,
        "urls": [r.output_url for r in results],
    }


def _run_mapped(job: ExportJob, storage: dict, options: dict, plan: Plan, committer: Committer, verify: str):
    """Tasks for the chunks ``plan`` could not reuse; the outcome of all of them, in order."""
    task = export_chunk_task.with_options(**options)
    n = len(plan.stamps)
    names = [f"{job.prefix}_chunk_{i}" for i in range(n)]
    progress = Progress(n, "h5pipe-export-progress", f"chunks exported to {job.output_dir}")
    progress.advance(len(plan.reused))

    def from_this_source(_: int, result: ExportChunkResult) -> ExportChunkResult:
        result.source_fingerprint = job.source_fingerprint  # a cache hit's key holds it too (tasks/keys.py)
        return result

    def rebuild(i: int) -> ExportChunkResult:
        return from_this_source(i, task.with_options(refresh_cache=True).submit(job, i, storage).result())

    ran = ChunkOutcome()
    if plan.todo:
        committer.begin()  # the folder is incomplete before any chunk is replaced
        futures = task.map(unmapped(job), plan.todo, unmapped(storage))
        ran = run_chunks(futures, [names[i] for i in plan.todo], progress, committer, from_this_source)
    outcome = merged(plan, ran)
    raise_failures(outcome, names)
    rebuild_bad_hits(
        outcome, names, lambda result: output_matches(result, verify, storage), rebuild, committer, get_run_logger()
    )
    return in_order(outcome, n)


def _run_stream(job: ExportJob, storage: dict, options: dict):
    task = export_stream_task.with_options(**options)
    state = task(job, storage, return_state=True)
    results = state.result()
    hit = state.name == "Cached"
    if hit and not all(output_matches(r, "sha256", storage) for r in results):
        results, hit = task.with_options(refresh_cache=True)(job, storage), False
    return results, [hit] * len(results)
