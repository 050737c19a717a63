"""Run a flow by name with the task runner its parameters ask for."""

from __future__ import annotations

from flows.runners import build_task_runner


def flow_by_name(name: str):
    if name == "export":
        from flows.export_flow import export_flow

        return export_flow
    if name == "cache":
        from flows.cache_flow import cache_flow

        return cache_flow
    from flows.pipeline_flow import pipeline_flow

    return pipeline_flow


def run_options_of(params):
    return params.cache.run if hasattr(params, "cache") else params.run


def run_flow(name: str, params) -> dict:
    flow = flow_by_name(name).with_options(task_runner=build_task_runner(run_options_of(params)))
    return flow(params)
