"""serve.py on a real Prefect server: it registers prefect.yaml's deployments and runs them itself.

It serves a copy of prefect.yaml whose deployments are named ``served``, so it does not replace the
work-pool deployments the other tests run on the same server.
"""

from __future__ import annotations

import sys

import pytest
import yaml

from deployments.spec import PREFECT_YAML
from tests.deployments.conftest import real_client, wait_for_runs
from tests.deployments.files import validate_folder
from tests.deployments.processes import start, wait_for

pytestmark = pytest.mark.slow


def renamed_copy(folder, name: str):
    config = yaml.safe_load(PREFECT_YAML.read_text(encoding="utf-8"))
    for entry in config["deployments"]:
        entry["name"] = name
    path = folder / "prefect.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path


@pytest.fixture()
def served(real_server, sample_dir, tmp_path):
    """``python -m deployments.serve`` for the export deployment, started outside the repository."""
    args = [sys.executable, "-m", "deployments.serve", "--prefect-file", str(renamed_copy(tmp_path, "served"))]
    env = real_server.env(H5PIPE_DATA=str(sample_dir), PREFECT_RUNNER_POLL_FREQUENCY="2")
    service = start("serve", [*args, "--name", "h5pipe-export/served"], env, real_server.logs, cwd=tmp_path)
    try:
        yield service
    finally:
        service.stop()


def deployment_or_none(client, name: str):
    from prefect.exceptions import ObjectNotFound

    try:
        return client.read_deployment_by_name(name)
    except ObjectNotFound:
        return None


def test_served_deployment_is_scheduled_limited_and_runs(real_server, served, sample_dir):
    with real_client(real_server) as client:
        wait_for(lambda: deployment_or_none(client, "h5pipe-export/served"), 300, "the served deployment", served)
        d = client.read_deployment_by_name("h5pipe-export/served")
        assert [(s.schedule.cron, s.schedule.timezone) for s in d.schedules] == [("0 1 * * 0", "UTC")]
        assert d.global_concurrency_limit.limit == 1 and d.concurrency_options.collision_strategy.value == "ENQUEUE"
        assert d.work_pool_name is None and "export" in d.tags
        assert d.parameters["params"]["output"] == f"{sample_dir}/export/jsonl"
        run = client.create_flow_run_from_deployment(d.id)
    (finished,) = wait_for_runs(real_server, [run.id], served)
    assert finished.state.is_completed(), f"{finished.state}\n{served.tail()}"
    entries = validate_folder(sample_dir / "export" / "jsonl", ".jsonl")
    assert sum(e["samples"] for e in entries.values()) == 600
