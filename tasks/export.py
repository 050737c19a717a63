"""export_chunk_task: chunk ``index`` of a source -> one JSONL file, cached on the data's fingerprint."""

from __future__ import annotations

import functools
import json
import time

from prefect import task
from prefect.logging import get_run_logger

from pipeline_core.commit.stamps import stamp_now
from pipeline_core.sources import open_source
from pipeline_core.stages.export import export_chunk, export_source
from pipeline_core.stages.process_func import load_process_func
from tasks.hashing import part_files
from tasks.keys import export_chunk_key, export_stream_key
from tasks.models import ExportChunkResult, ExportJob
from tasks.retry import retry_on_transient

RETRY = dict(retries=3, retry_delay_seconds=[2, 4, 8], retry_jitter_factor=0.5, retry_condition_fn=retry_on_transient)


@functools.lru_cache(maxsize=4)
def _source(source: str, options: str, storage_key: str, storage_options: tuple):
    return open_source(source, storage_options=dict(storage_options) or None, **json.loads(options))


def open_job_source(job: ExportJob, storage_options: dict | None):
    storage = tuple(sorted((storage_options or {}).items()))
    return _source(job.source, json.dumps(job.source_options(), sort_keys=True), job.source_fingerprint, storage)


def _result(stats, seconds: float, storage_options: dict | None = None) -> ExportChunkResult:
    """The chunk's result with its output's stamp: the sha256 was taken as the lines were written, and
    the folder's lock keeps other writers out until the stamp is taken, so a hit is known by it."""
    d = stats.to_dict()
    parts = part_files([stats.errors_url] if stats.errors_url else [], storage_options)
    fields = {k: v for k, v in d.items() if k in ExportChunkResult.model_fields}
    stamp = stamp_now(stats.output_url, storage_options)
    return ExportChunkResult(seconds=seconds, parts=parts, output_stamp=stamp, **fields)


@task(name="export-chunk", cache_key_fn=export_chunk_key, persist_result=True, result_serializer="json", **RETRY)
def export_chunk_task(job: ExportJob, index: int, storage_options: dict | None = None) -> ExportChunkResult:
    started = time.perf_counter()
    source = open_job_source(job, storage_options)
    func = load_process_func(job.process_func)
    stats = export_chunk(
        source, index, job.output_dir, job.prefix, job.chunk_size, func, storage_options, on_error=job.on_error
    )
    get_run_logger().info("%s: %d rows in, %d out", stats.output_url, stats.rows_in, stats.rows_out)
    return _result(stats, time.perf_counter() - started, storage_options)


@task(name="export-stream", cache_key_fn=export_stream_key, persist_result=True, result_serializer="json", **RETRY)
def export_stream_task(job: ExportJob, storage_options: dict | None = None) -> list[ExportChunkResult]:
    """A streaming source has no row count, so its chunks come from one sequential pass."""
    started = time.perf_counter()
    source = open_job_source(job, storage_options)
    func = load_process_func(job.process_func)
    result = export_source(
        source, job.output_dir, job.prefix, job.chunk_size, func, storage_options, on_error=job.on_error
    )
    return [_result(stats, time.perf_counter() - started, storage_options) for stats in result.chunks]
