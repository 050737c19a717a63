"""Task runner selection: threads (default), processes, or Dask (local cluster or an address).

Worker processes report to this run's API. Prefect hands each task its settings, but when no API
address is configured the parent's API is a temporary server it started on first use, and every
worker process (``processes``, Dask worker processes) would start a temporary server of its own
(three servers on two cores; the first task ended ~20 s into the flow). So before a runner with
worker processes starts, the parent's API address goes into the settings and the environment the
workers inherit, for the subflow's lifetime.
"""

from __future__ import annotations

import contextlib
import os
from collections.abc import Callable, Iterator

from flows.params import RunOptions

DEFAULT = RunOptions()


def default_task_runner():
    """The runner a flow is declared with: threads, ``RunOptions().max_workers`` of them."""
    from prefect.task_runners import ThreadPoolTaskRunner

    return ThreadPoolTaskRunner(max_workers=DEFAULT.max_workers)


def needs_own_runner(run: RunOptions) -> bool:
    """True when the parameters ask for another runner than the declared default."""
    return run.task_runner != DEFAULT.task_runner or run.max_workers != DEFAULT.max_workers


def run_here_or_on_runner(params, on_runner_flow, body: Callable):
    """``body(params)`` in this flow run, on its declared default runner, or, when ``params.run``
    asks for another runner, as the subflow ``on_runner_flow`` given that runner."""
    if needs_own_runner(params.run):
        with workers_report_here(params.run):
            return on_runner_flow.with_options(task_runner=build_task_runner(params.run))(params)
    return body(params)


def parent_api_url() -> str | None:
    """This flow run's API address when the settings name none (a temporary server), else None."""
    from prefect.context import FlowRunContext
    from prefect.settings import get_current_settings

    context = FlowRunContext.get()
    if get_current_settings().api.url or context is None or context.client is None:
        return None
    return str(context.client.api_url).rstrip("/")


@contextlib.contextmanager
def workers_report_here(run: RunOptions) -> Iterator[None]:
    """Within the block, worker processes started here use this run's API (see the module docstring)."""
    url = parent_api_url() if has_worker_processes(run) else None
    if url is None:
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    saved = os.environ.get("PREFECT_API_URL")
    os.environ["PREFECT_API_URL"] = url
    try:
        with temporary_settings({PREFECT_API_URL: url}):
            yield
    finally:
        if saved is None:
            os.environ.pop("PREFECT_API_URL", None)
        else:
            os.environ["PREFECT_API_URL"] = saved


def build_task_runner(run: RunOptions):
    if run.task_runner == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=run.max_workers)
    if run.task_runner == "processes":
        from flows.process_pool import ReportingProcessPool

        return ReportingProcessPool(max_workers=run.max_workers)
    from prefect_dask import DaskTaskRunner

    if run.dask_address:
        return DaskTaskRunner(address=run.dask_address)
    return DaskTaskRunner(cluster_kwargs=local_cluster_kwargs(run))


def local_cluster_kwargs(run: RunOptions) -> dict:
    """A LocalCluster of ``max_workers`` threads in one in-process worker, or of as many worker processes."""
    if run.dask_workers == "threads":
        return {"n_workers": 1, "threads_per_worker": run.max_workers, "processes": False}
    return {"n_workers": run.max_workers, "threads_per_worker": 1, "processes": True}


def has_worker_processes(run: RunOptions) -> bool:
    """True when the runner's tasks run in other processes (``processes``, Dask's worker processes)."""
    if run.task_runner == "dask":
        return bool(run.dask_address) or run.dask_workers == "processes"
    return run.task_runner == "processes"
