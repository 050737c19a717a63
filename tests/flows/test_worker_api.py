"""Worker processes report to the parent run's API: one Prefect server for a whole run.

Run in a fresh interpreter with no API configured (its own PREFECT_HOME), as a notebook or
``H5PIPE_SERVER=temporary`` runs it: the parent starts Prefect's temporary server, and the
process pool and a real Dask LocalCluster (two worker processes, or the default in-process
worker) must use that server instead of each
starting one. Prefect logs every temporary server it starts, in whichever process.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import write_chunks

pytestmark = pytest.mark.slow

RUNS = {
    "processes": {"task_runner": "processes"},
    "dask-processes": {"task_runner": "dask", "dask_workers": "processes"},
    "dask-threads": {"task_runner": "dask"},  # the default local cluster: one in-process worker
}
SCRIPT = (
    f"RUNS = {RUNS!r}\n"
    + """
import sys
from flows.params import CacheParams
from flows.runs import run_flow

inputs, out, tokenizer = sys.argv[1:4]
for name, run in RUNS.items():
    params = CacheParams(
        input=inputs, output=f"{out}/{name}", pack_size=256, pad_value=0,
        tokenizer={"path": tokenizer, "eos_token": "<|endoftext|>"},
        run={**run, "max_workers": 2},
    )
    summary = run_flow("cache", params)["summary"]
    print(name, summary["chunks"], summary["cached_chunks"], flush=True)
"""
)


def test_process_and_dask_workers_use_the_parents_temporary_server(tmp_path, llamafactory, gpt2_path):
    inputs = write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 3)
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(tmp_path / "prefect-home"),
        PREFECT_SERVER_EPHEMERAL_STARTUP_TIMEOUT_SECONDS="180",
        PREFECT_LOGGING_LEVEL="INFO",
        TOKENIZERS_PARALLELISM="false",
    )
    done = subprocess.run(
        [sys.executable, "-c", SCRIPT, str(inputs), str(tmp_path / "out"), str(gpt2_path)],
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stderr[-4000:]
    assert done.stdout.split() == [word for name in RUNS for word in (name, "3", "0")]
    assert done.stderr.count("Starting temporary server") == 1, done.stderr[-4000:]
    for name in RUNS:
        assert len(list((tmp_path / "out" / name).glob("*.h5"))) == 3
