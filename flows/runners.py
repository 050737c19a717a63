"""Task runner selection: threads (default), processes, or Dask (local cluster or an address)."""

from __future__ import annotations

from collections.abc import Callable

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
        return on_runner_flow.with_options(task_runner=build_task_runner(params.run))(params)
    return body(params)


def build_task_runner(run: RunOptions):
    if run.task_runner == "threads":
        from prefect.task_runners import ThreadPoolTaskRunner

        return ThreadPoolTaskRunner(max_workers=run.max_workers)
    if run.task_runner == "processes":
        from prefect.task_runners import ProcessPoolTaskRunner

        return ProcessPoolTaskRunner(max_workers=run.max_workers)
    from prefect_dask import DaskTaskRunner

    if run.dask_address:
        return DaskTaskRunner(address=run.dask_address)
    return DaskTaskRunner(cluster_kwargs={"n_workers": run.max_workers, "threads_per_worker": 1, "processes": True})
