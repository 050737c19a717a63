"""cache_flow on Dask: a real two-process LocalCluster, and the default in-process one, write what
the thread runner writes, and cache.

The workers are separate processes started by the test, so they are given the harness's
PREFECT_API_URL in their environment: without it a worker would start a temporary Prefect server
of its own (Prefect also ships its settings with every task, but the worker must not depend on it).
"""

from __future__ import annotations

import numpy as np
import pytest

from flows.params import CacheParams
from flows.runs import run_flow
from pipeline_core import load_h5, read_attrs
from tests.conftest import load_json_or_jsonl
from tests.deployments.files import write_chunks

TIMING_ATTRS = {"seconds", "created", "created_at", "elapsed"}

pytestmark = pytest.mark.slow


def cache_params(gpt2_path, input, output, **run) -> CacheParams:
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    return CacheParams(input=str(input), output=str(output), tokenizer=tokenizer, pack_size=256, pad_value=0, run=run)


@pytest.fixture()
def dask_cluster():
    """Two worker processes, one thread each, pointed at the session's Prefect test server."""
    from distributed import LocalCluster
    from prefect.settings import PREFECT_API_URL

    env = {"PREFECT_API_URL": PREFECT_API_URL.value(), "TOKENIZERS_PARALLELISM": "false"}
    cluster = LocalCluster(
        n_workers=2, processes=True, threads_per_worker=1, env=env, dashboard_address=None, death_timeout=120
    )
    try:
        yield cluster
    finally:
        cluster.close(timeout=60)


def h5_contents(path) -> tuple[dict, dict]:
    attrs = {k: v for k, v in read_attrs(str(path)).items() if k not in TIMING_ATTRS}
    arrays = {}
    for key, value in load_h5(str(path)).items():
        arrays[key] = [t.numpy() for t in value] if isinstance(value, list) else [value.numpy()]
    return attrs, arrays


def assert_same_h5(a, b) -> None:
    attrs_a, arrays_a = h5_contents(a)
    attrs_b, arrays_b = h5_contents(b)
    assert attrs_a == attrs_b
    assert sorted(arrays_a) == sorted(arrays_b)
    for key in arrays_a:
        assert len(arrays_a[key]) == len(arrays_b[key]), key
        for x, y in zip(arrays_a[key], arrays_b[key]):
            assert x.dtype == y.dtype and np.array_equal(x, y), key


def test_dask_writes_what_threads_write_and_caches_per_chunk(gpt2_path, llamafactory, tmp_path, dask_cluster):
    chunks = write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 3)
    threads = run_flow("cache", cache_params(gpt2_path, chunks, tmp_path / "threads"))
    on_dask = cache_params(
        gpt2_path, chunks, tmp_path / "dask", task_runner="dask", dask_address=dask_cluster.scheduler_address
    )
    first = run_flow("cache", on_dask)
    on_dask.run.trust_stamps = False  # every chunk through its tasks again: Prefect cache hits on the workers
    second = run_flow("cache", on_dask)
    on_dask.run.trust_stamps = True
    ran_before_reuse = executed_on_workers(dask_cluster)
    third = run_flow("cache", on_dask)  # unchanged: reused from the manifest, nothing sent to Dask

    assert first["cached"] == [False, False, False]
    assert second["cached"] == [True, True, True] == third["cached"]
    assert executed_on_workers(dask_cluster) == ran_before_reuse
    assert first["summary"]["tokens_written"] == threads["summary"]["tokens_written"] > 0
    names = sorted(p.name for p in (tmp_path / "threads").glob("*.h5"))
    assert (
        names == sorted(p.name for p in (tmp_path / "dask").glob("*.h5")) == [f"train_chunk_{i}.h5" for i in range(3)]
    )
    for name in names:
        assert_same_h5(tmp_path / "threads" / name, tmp_path / "dask" / name)
    # the chunks really ran in the worker processes: one group task per worker (flows/grouped.py),
    # [0, 1] and [2], in each of the two runs that were not reused
    assert executed_on_workers(dask_cluster) == 4


def executed_on_workers(cluster) -> int:
    from distributed import Client

    with Client(cluster) as client:
        counts = client.run(lambda dask_worker: dask_worker.state.executed_count)
    return sum(counts.values())


def test_the_default_local_cluster_runs_in_process_and_writes_what_threads_write(gpt2_path, llamafactory, tmp_path):
    """Without dask_address, ``dask_workers`` (default threads) makes one in-process worker of
    ``max_workers`` threads; ``processes`` one worker process each. The files are the threads runner's."""
    from flows.params import RunOptions
    from flows.runners import has_worker_processes, local_cluster_kwargs

    assert local_cluster_kwargs(RunOptions(task_runner="dask", max_workers=3)) == {
        "n_workers": 1, "threads_per_worker": 3, "processes": False,
    }  # fmt: skip
    assert local_cluster_kwargs(RunOptions(task_runner="dask", max_workers=3, dask_workers="processes")) == {
        "n_workers": 3, "threads_per_worker": 1, "processes": True,
    }  # fmt: skip
    assert not has_worker_processes(RunOptions(task_runner="dask"))
    assert has_worker_processes(RunOptions(task_runner="dask", dask_workers="processes"))
    assert has_worker_processes(RunOptions(task_runner="dask", dask_address="tcp://elsewhere:8786"))

    chunks = write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 3)
    run_flow("cache", cache_params(gpt2_path, chunks, tmp_path / "threads"))
    run_flow("cache", cache_params(gpt2_path, chunks, tmp_path / "dask", task_runner="dask"))
    names = sorted(p.name for p in (tmp_path / "threads").glob("*.h5"))
    assert (
        names == sorted(p.name for p in (tmp_path / "dask").glob("*.h5")) == [f"train_chunk_{i}.h5" for i in range(3)]
    )
    for name in names:
        assert_same_h5(tmp_path / "threads" / name, tmp_path / "dask" / name)
