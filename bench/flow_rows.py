"""The benchmark's flow rows: the cache flow run as the CLI runs it, on threads, processes or Dask.

``flow_pt_packed`` (the pt target row and its runner variants), ``flow_small_job`` (what one run
costs whatever its size) and ``cached_rerun`` (cold, then every chunk reused). Prefect's temporary
server starts before the clock (``start_prefect``); worker processes and a local Dask cluster
start inside it, as they do for a user. bench/rows.py lists them with the other rows.
"""

from __future__ import annotations

import functools
import time
from collections.abc import Callable
from pathlib import Path

from bench.corpus import GPT2, GPT2_EOS
from bench.measure import Context, Measured, timed

SMALL_ROWS = 200  # rows in the per-run-cost job (flow_small_job)
PACK = 2048


def gpt2_eos_id() -> int:
    from tokenizers import Tokenizer

    return Tokenizer.from_file(str(GPT2)).token_to_id(GPT2_EOS)


def start_prefect() -> None:
    """Start Prefect's temporary server (or reach PREFECT_API_URL) before the clock starts."""
    from prefect import flow

    @flow(name="h5pipe-bench-warmup")
    def warmup() -> int:
        return 1

    warmup()


def cache_params(inputs: Path, output: Path, pack_size: int, task_runner: str = "threads", **run):
    """The cache flow's parameters for these rows; ``run``: further RunOptions (e.g. dask_workers)."""
    from flows.params import CacheParams, RunOptions, TokenizerParams

    return CacheParams(
        input=str(inputs),
        output=str(output),
        tokenizer=TokenizerParams(path=str(GPT2), eos_token=GPT2_EOS),
        processor="pt",
        pack_size=pack_size,
        pad_value=gpt2_eos_id() if pack_size else None,  # GPT-2 has no pad token: pad with eos
        run=RunOptions(max_workers=2, task_runner=task_runner, **run),
    )


def cache_runner() -> Callable:
    """The cache flow run as the CLI runs it (``flows.runs.run_flow``, an ad hoc run). The flow's
    modules are imported here, before the clock, like every row's libraries."""
    import flows.cache_flow  # noqa: F401
    from flows.runs import run_flow

    return functools.partial(run_flow, "cache")


def flow_pt_packed(task_runner: str = "threads", **options) -> Callable[[Context], Measured]:
    """The cache flow on the pt corpus, packed, 2 workers of ``task_runner`` (``options``: further
    RunOptions). Worker processes and a local Dask cluster start inside the timed run, as they do
    for a user."""

    def run(ctx: Context) -> Measured:
        cache = cache_runner()
        start_prefect()
        params = cache_params(ctx.folder("pt"), ctx.work / "h5", PACK, task_runner, **options)
        seconds, result = timed(lambda: cache(params))
        summary = result["summary"]
        detail = {"chunks": summary["chunks"], "flow_seconds": summary["seconds"], "task_runner": task_runner}
        return Measured(seconds, int(summary["tokens_written"]), detail)

    return run


def flow_small_job(ctx: Context) -> Measured:
    """The target row's flow on its first SMALL_ROWS rows only: what one run costs whatever its size
    (Prefect's run, the tokenizer load, the backend's first call), measured in its own process."""
    cache = cache_runner()
    small = ctx.work / "small"
    small.mkdir()
    with open(ctx.files("pt")[0], "rb") as src, open(small / "train_chunk_0.jsonl", "wb") as dst:
        dst.writelines(line for _, line in zip(range(SMALL_ROWS), src))
    start_prefect()
    params = cache_params(small, ctx.work / "h5", PACK)
    seconds, result = timed(lambda: cache(params))
    summary = result["summary"]
    return Measured(seconds, int(summary["tokens_written"]), {"rows": SMALL_ROWS, "flow_seconds": summary["seconds"]})


def cached_rerun(ctx: Context) -> Measured:
    """The same cache_flow twice in one process: cold, then unchanged (every chunk reused from the manifest).

    Between the two, the clock stops until the Prefect server has recorded every task run of the
    cold run (``settle``, reported too): the temporary server ingests the cold run's task-run
    events for seconds after the flow returns, and API calls of the next run would queue behind
    them. A rerun hours later never meets that backlog.
    """
    cache = cache_runner()
    start_prefect()
    params = cache_params(ctx.folder("pt"), ctx.work / "h5", PACK)
    cold, state = timed(lambda: cache(params, return_state=True))
    first = state.result()
    expected = task_runs_of(ctx.files("pt"))
    settle, _ = timed(lambda: wait_for_task_runs(state.state_details.flow_run_id, expected))
    warm, second = timed(lambda: cache(params))
    detail = {"cold": cold, "warm": warm, "settle": settle, "chunks": first["summary"]["chunks"]}
    detail["cached_chunks"] = second["summary"]["cached_chunks"]
    return Measured(cold, int(first["summary"]["tokens_written"]), detail)


def task_runs_of(files: list[Path], workers: int = 2) -> int:
    """Task runs a cold cache_flow makes: one batch task per group of small chunks
    (flows/batching.py), else a cache task per chunk (the flow hashes them itself)."""
    from flows.batching import batches

    groups = batches([f.stat().st_size for f in files], workers)
    return len(groups) if groups is not None else len(files)


def wait_for_task_runs(flow_run_id, expected: int, timeout: float = 300.0) -> None:
    """Until the server lists ``expected`` finished task runs of the flow run (or ``timeout``)."""
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import (
        FlowRunFilter,
        FlowRunFilterId,
        TaskRunFilter,
        TaskRunFilterState,
        TaskRunFilterStateType,
    )
    from prefect.client.schemas.objects import StateType

    runs = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    done = TaskRunFilter(state=TaskRunFilterState(type=TaskRunFilterStateType(any_=[StateType.COMPLETED])))
    deadline = time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while len(client.read_task_runs(flow_run_filter=runs, task_run_filter=done, limit=expected)) < expected:
            if time.monotonic() > deadline:
                raise TimeoutError(f"the server recorded fewer than {expected} task runs in {timeout:.0f} s")
            time.sleep(0.2)
