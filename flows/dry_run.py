"""``--dry-run``: what a run would do, and nothing written: how many chunks, which the manifest
shows as current (reused without a task), which would run, and which parts of the folder an
earlier run wrote that it would remove (``removes``: ``validation`` when val_size was dropped).

The plan is the one the flows make before submitting tasks (``flows.plan``), read from the
output folder's manifest; no Prefect run, no output, no manifest write. A chunk listed as to do
may still turn out a cache hit of Prefect's content-keyed cache when it runs.
"""

from __future__ import annotations

from flows.commit import Committer
from flows.layouts import stale_parts
from flows.params import CacheParams, ExportParams
from flows.plan import plan_exports
from pipeline_core.stages.export import chunk_count, chunk_name
from pipeline_core.storage.fs import join_url
from pipeline_core.storage.redact import protect_secrets
from tasks.keys import digest


def dry_run(flow_name: str, params) -> dict:
    """The plan of an ``export`` or ``cache`` run with ``params``."""
    return {"export": export_plan, "cache": cache_plan}[flow_name](params)


def cache_plan(params: CacheParams) -> dict:
    """Chunks, those current in the manifest, and those a run would cache."""
    from flows.cache_flow import chunk_inputs, make_job, rerun_plan

    storage = _storage(params)
    job = make_job(params)  # the tokenizer loads and the processor builds, as a run checks first
    inputs = chunk_inputs(params.input, storage, params.limit)
    removes = _removes(stale_parts(params, storage))  # refused here as the run would refuse
    if params.val_size is not None or params.shuffle:
        return {**_split_plan(params, inputs, storage), **removes}
    committer = Committer.open(params.output, "cache", digest(job.settings()), params.overwrite, storage)
    _, _, plan = rerun_plan(params, job, inputs, committer, storage)
    return {**_report("cache", params.output, inputs, plan), **removes}


def _removes(stale: list[str]) -> dict:
    """The parts of the folder an ``overwrite`` run would remove (flows/layouts.py), when there are any."""
    return {"removes": [part or "." for part in stale]} if stale else {}


def export_plan(params: ExportParams) -> dict:
    """Rows, chunks, those current in the manifest, and those a run would export."""
    from flows.export_flow import make_export_job

    storage = _storage(params)
    job, source = make_export_job(params, storage)
    datasets = {name: counts.to_dict() for name, counts in source.summary().items()}
    if source.num_rows is None:
        return {"stage": "export", "output": params.output, "rows": None, "chunks": None, "datasets": datasets}
    n = chunk_count(source.num_rows, params.chunk_size)
    committer = Committer.open(params.output, "export", digest(job.settings()), params.overwrite, storage)
    plan = plan_exports(job, n, committer.previous(), storage, params.run.trust_stamps)
    names = [join_url(params.output, chunk_name(params.prefix, i)) for i in range(n)]
    return {**_report("export", params.output, names, plan), "rows": source.num_rows, "datasets": datasets}


def _split_plan(params: CacheParams, inputs: list[str], storage: dict) -> dict:
    """A split run's plan: rows per split (the shards and their chunks exist only once it runs)."""
    from flows.splits_flow import split_options
    from pipeline_core.stages.splits import count_rows

    rows = sum(count_rows(u, storage) for u in inputs)
    validation = split_options(params).validation_count(rows)
    splits = {"train": rows - validation, **({"validation": validation} if params.val_size is not None else {})}
    return {
        "stage": "cache",
        "output": params.output,
        "inputs": len(inputs),
        "rows": rows,
        "splits": splits,
        "shuffle": params.shuffle,
        "written": False,
    }


def _storage(params) -> dict:
    storage = params.run.storage.to_fsspec()
    protect_secrets(storage)
    return storage


def _report(stage: str, output: str, names: list[str], plan) -> dict:
    return {
        "stage": stage,
        "output": output,
        "chunks": len(names),
        "cached": len(plan.reused),
        "to_do": len(plan.todo),
        "to_do_chunks": [names[i] for i in plan.todo],
        "written": False,
    }
