"""Run a flow by name, as an ad hoc run (the CLI, a notebook, the benchmark); each flow picks the
task runner its own parameters ask for.

Heartbeats. Prefect 3.9 has every flow run emit a heartbeat event (default every 180 s) so an
automation can mark runs whose process died as crashed; its docs present them for runs that
deployments trigger. The sync engine joins the heartbeat thread when the run ends, and that
thread sleeps in whole seconds, so each run lasts until the next whole second after it started
(measured: 0.3-0.9 s per run, most of a cached rerun). Ad hoc runs therefore run without
heartbeats unless the user set a frequency (PREFECT_FLOWS_HEARTBEAT_FREQUENCY, its legacy
PREFECT_RUNNER_ name, a profile or prefect.toml). Runs of deployments (``h5pipe serve``, workers)
do not come through here and keep Prefect's setting.
"""

from __future__ import annotations

import contextlib


def flow_by_name(name: str):
    if name == "export":
        from flows.export_flow import export_flow

        return export_flow
    if name == "cache":
        from flows.cache_flow import cache_flow

        return cache_flow
    from flows.pipeline_flow import pipeline_flow

    return pipeline_flow


def ad_hoc_settings() -> contextlib.AbstractContextManager:
    """Prefect settings for a run started here: heartbeats off unless the user chose a frequency."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, get_current_settings, temporary_settings

    if "heartbeat_frequency" in get_current_settings().flows.model_fields_set:
        return contextlib.nullcontext()
    return temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None})


def run_flow(name: str, params, **options):
    """``options`` go to the flow call (``return_state=True``...)."""
    with ad_hoc_settings():
        return flow_by_name(name)(params, **options)
