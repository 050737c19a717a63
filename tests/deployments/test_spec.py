"""prefect.yaml and serve.py without a server: the file parses as Prefect parses it, its parameters
are valid flow parameters, and serve.py builds the same deployments from it."""

from __future__ import annotations

import pytest
import yaml

from deployments.serve import full_name, main, select, to_deployment
from deployments.spec import PREFECT_YAML, DeploymentSpecError, load_specs, require_parameters_set
from flows.params import CacheParams, ExportParams, PipelineParams

MODELS = {"h5pipe-pipeline": PipelineParams, "h5pipe-export": ExportParams, "h5pipe-cache": CacheParams}


@pytest.fixture()
def specs(tmp_path):
    return load_specs(environ={"H5PIPE_DATA": str(tmp_path)})


def test_prefect_parses_the_file_without_complaint():
    """``prefect deploy`` only warns and skips on a schema error, so check with its own model."""
    from prefect.cli.deploy._models import PrefectYamlModel

    raw = yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))
    model = PrefectYamlModel.model_validate(raw)
    assert len(model.deployments) == len(raw["deployments"]) == 3
    assert raw["pull"] == [{"prefect.deployments.steps.set_working_directory": {"directory": "{{ $H5PIPE_HOME }}"}}]


def test_one_deployment_per_flow_each_scheduled_limited_and_tagged(specs):
    assert sorted(full_name(s) for s in specs) == [
        "h5pipe-cache/sample",
        "h5pipe-export/sample",
        "h5pipe-pipeline/sample",
    ]
    for spec in specs:
        assert spec.concurrency_limit == 1 and spec.collision_strategy == "ENQUEUE"
        assert spec.work_pool == "h5pipe-pool"
        assert "h5pipe" in spec.tags and spec.schedules and all(s.timezone == "UTC" for s in spec.schedules)


def test_parameters_are_valid_flow_parameters_under_the_data_folder(specs, tmp_path):
    for spec in specs:
        params = MODELS[full_name(spec).split("/")[0]].model_validate(spec.parameters["params"])
        outputs = [params.output] if hasattr(params, "output") else [params.export.output, params.cache.output]
        assert all(o.startswith(str(tmp_path)) for o in outputs)
    assert len({o for s in specs for o in _outputs(s)}) == 4  # every deployment writes its own folders


def _outputs(spec) -> list[str]:
    params = spec.parameters["params"]
    return [params["export"]["output"], params["cache"]["output"]] if "export" in params else [params["output"]]


def test_unset_data_variable_is_refused_with_the_fix():
    (spec, *_) = load_specs(environ={})
    with pytest.raises(DeploymentSpecError, match=r"needs H5PIPE_DATA.*export H5PIPE_DATA="):
        require_parameters_set(spec)


def test_serve_builds_the_same_deployments(specs):
    for spec in specs:
        d = to_deployment(spec)
        assert (d.name, d.parameters, sorted(d.tags)) == (spec.name, spec.parameters, sorted(spec.tags))
        assert [s.schedule.cron for s in d.schedules] == [s.cron for s in spec.schedules]
        assert d.concurrency_limit == 1 and d.concurrency_options.collision_strategy.value == "ENQUEUE"
        assert d.entrypoint == f"{spec.module}.{spec.function}" and d.work_pool_name is None


def test_serve_refuses_an_unknown_name_listing_the_known_ones(specs):
    with pytest.raises(
        DeploymentSpecError, match=r"unknown deployment\(s\) h5pipe-cache/nope; choose from .*h5pipe-cache/sample"
    ):
        select(specs, ["h5pipe-cache/nope"])
    assert [full_name(s) for s in select(specs, ["h5pipe-cache/sample"])] == ["h5pipe-cache/sample"]


def test_serve_main_exits_with_the_message_when_data_is_unset(monkeypatch):
    monkeypatch.delenv("H5PIPE_DATA", raising=False)
    with pytest.raises(SystemExit, match="h5pipe serve: deployment 'sample'.*needs H5PIPE_DATA"):
        main([])
