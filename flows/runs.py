"""Run a flow by name; each flow picks the task runner its own parameters ask for."""

from __future__ import annotations


def flow_by_name(name: str):
    if name == "export":
        from flows.export_flow import export_flow

        return export_flow
    if name == "cache":
        from flows.cache_flow import cache_flow

        return cache_flow
    from flows.pipeline_flow import pipeline_flow

    return pipeline_flow


def run_flow(name: str, params) -> dict:
    return flow_by_name(name)(params)
