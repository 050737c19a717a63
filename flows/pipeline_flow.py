"""pipeline_flow: export, then cache exactly the chunks the export wrote."""

from __future__ import annotations

from prefect import flow

from flows.cache_flow import cache_flow
from flows.export_flow import export_flow
from flows.params import PipelineParams


@flow(name="h5pipe-pipeline", validate_parameters=True, result_serializer="json")
def pipeline_flow(params: PipelineParams) -> dict:
    exported = export_flow(params.export)
    cache_params = params.cache.model_copy(update={"input": exported["urls"]})
    cached = cache_flow(cache_params)
    return {
        "export": exported["summary"],
        "cache": cached["summary"],
        "summary": {"export": exported["summary"], "cache": cached["summary"]},
    }
