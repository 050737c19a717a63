"""End to end on a real Prefect server: deploy prefect.yaml, run on a process worker, check outputs.

The worker runs flows in its own subprocesses, so these tests see only what a user sees: the
server's API (runs, states, schedules, artifacts) and the files on disk.
"""

from __future__ import annotations

import json
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager

import pytest

from deployments.serve import full_name
from tests.conftest import load_json_or_jsonl
from tests.deployments.conftest import real_client, wait_for_runs
from tests.deployments.files import validate_folder, write_chunks

pytestmark = pytest.mark.slow


def deployment(server, name: str):
    with real_client(server) as client:
        return client.read_deployment_by_name(name)


def artifacts_of(server, run_ids: list) -> dict:
    """``{key: artifact}`` of the given flow runs and of their subflow runs."""
    from prefect.client.schemas.filters import (
        ArtifactFilter,
        ArtifactFilterFlowRunId,
        FlowRunFilter,
        FlowRunFilterParentFlowRunId,
    )

    with real_client(server) as client:
        children = client.read_flow_runs(
            flow_run_filter=FlowRunFilter(parent_flow_run_id=FlowRunFilterParentFlowRunId(any_=run_ids))
        )
        ids = [*run_ids, *(r.id for r in children)]
        found = client.read_artifacts(artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=ids)))
    return {a.key: a for a in found}


@contextmanager
def paused(server, deployment):
    """Hold the deployment's queue while the body creates runs; a run created between two polls of
    a busy worker could otherwise start only after the first one ended, and never wait for the slot."""
    with real_client(server) as client:
        queue = client.read_work_queue_by_name(deployment.work_queue_name, work_pool_name=deployment.work_pool_name)
        client.update_work_queue(queue.id, is_paused=True)
        try:
            yield
        finally:
            client.update_work_queue(queue.id, is_paused=False)


def table(artifact) -> list[dict]:
    return json.loads(artifact.data) if isinstance(artifact.data, str) else artifact.data


def test_prefect_yaml_is_registered_as_written(real_server, deployed, specs, work_pool):
    for spec in specs:
        d = deployment(real_server, full_name(spec))
        crons = [(s.schedule.cron, s.schedule.timezone, s.active) for s in d.schedules]
        assert crons == [(s.cron, s.timezone, s.active) for s in spec.schedules]
        assert d.global_concurrency_limit.limit == spec.concurrency_limit == 1
        assert d.concurrency_options.collision_strategy.value == spec.collision_strategy == "ENQUEUE"
        assert set(d.tags) == set(spec.tags) and "h5pipe" in d.tags
        assert d.work_pool_name == work_pool
        assert d.parameters == spec.parameters and "{{" not in json.dumps(d.parameters)
        assert d.pull_steps == [
            {"prefect.deployments.steps.set_working_directory": {"directory": "{{ $H5PIPE_HOME }}"}}
        ]  # resolved on the worker, at run time


def test_scheduled_pipeline_runs_on_a_worker_and_its_outputs_validate(real_server, worker, sample_dir):
    d = deployment(real_server, "h5pipe-pipeline/sample")
    assert [s.schedule.cron for s in d.schedules] == ["0 2 * * *"]
    with real_client(real_server) as client:
        run = client.create_flow_run_from_deployment(d.id)  # the deployed defaults: the sample
    (finished,) = wait_for_runs(real_server, [run.id], worker)
    assert finished.state.is_completed(), f"{finished.state}\n{worker.tail()}"

    exported = validate_folder(sample_dir / "jsonl", ".jsonl")
    cached = validate_folder(sample_dir / "h5", ".h5")
    assert sum(e["samples"] for e in exported.values()) == 600
    assert sorted(e["source_sha256"] for e in cached.values()) == sorted(e["sha256"] for e in exported.values())

    artifacts = artifacts_of(real_server, [run.id])
    keys = {f"h5pipe-{stage}-{kind}" for stage in ("export", "cache") for kind in ("chunks", "summary", "progress")}
    assert keys <= set(artifacts)
    rows = table(artifacts["h5pipe-cache-chunks"])
    assert sum(r["samples"] for r in rows) == 600 == sum(e["samples"] for e in cached.values())
    assert "| samples_written | 600 |" in artifacts["h5pipe-cache-summary"].data
    assert float(artifacts["h5pipe-cache-progress"].data) == 100.0


def test_two_runs_at_once_queue_on_the_concurrency_limit_and_outputs_validate(
    real_server, worker, gpt2_path, llamafactory, tmp_path
):
    chunks = write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 3)
    out = tmp_path / "out"
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    params = {"input": str(chunks), "output": str(out), "tokenizer": tokenizer, "pack_size": 256, "pad_value": 0}
    d = deployment(real_server, "h5pipe-cache/sample")

    def trigger(_):
        with real_client(real_server) as client:
            return client.create_flow_run_from_deployment(d.id, parameters={"params": params}).id

    with paused(real_server, d), ThreadPoolExecutor(2) as pool:
        run_ids = list(pool.map(trigger, range(2)))  # the worker sees both in one poll, whatever the load
        time.sleep(3)  # longer than the worker's 2 s poll: the pause holds them
        with real_client(real_server) as client:
            assert [client.read_flow_run(i).state.name for i in run_ids] == ["Scheduled"] * 2
    runs = wait_for_runs(real_server, run_ids, worker)
    assert all(r.state.is_completed() for r in runs), [str(r.state) for r in runs]

    first, second = sorted(runs, key=lambda r: r.start_time)
    assert second.start_time >= first.end_time  # never both running on the same outputs
    with real_client(real_server) as client:
        waited = [s.name for s in client.read_flow_run_states(second.id)]
    assert "AwaitingConcurrencySlot" in waited
    assert [r["cached"] for r in table(artifacts_of(real_server, [first.id])["h5pipe-cache-chunks"])] == [False] * 3
    assert [r["cached"] for r in table(artifacts_of(real_server, [second.id])["h5pipe-cache-chunks"])] == [True] * 3

    entries = validate_folder(out, ".h5")
    assert sum(e["samples"] for e in entries.values()) == 300
    record = json.loads((out / "h5pipe-run.json").read_text(encoding="utf-8"))
    assert record["summary"]["cached_chunks"] == 3  # the run that finished last wrote the record
