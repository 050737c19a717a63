"""Worker processes report to the parent run's API: one Prefect server for a whole run.

Run in a fresh interpreter with no API configured (its own PREFECT_HOME), as a notebook or
``H5PIPE_SERVER=temporary`` runs it: the parent starts Prefect's temporary server, and the
process pool and a real two-worker Dask LocalCluster must use that server instead of each
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

SCRIPT = """
import sys
from flows.params import CacheParams
from flows.runs import run_flow

inputs, out, tokenizer = sys.argv[1:4]
for runner in ("processes", "dask"):
    params = CacheParams(
        input=inputs, output=f"{out}/{runner}", pack_size=256, pad_value=0,
        tokenizer={"path": tokenizer, "eos_token": "<|endoftext|>"},
        run={"task_runner": runner, "max_workers": 2},
    )
    summary = run_flow("cache", params)["summary"]
    print(runner, summary["chunks"], summary["cached_chunks"], flush=True)
"""


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
    assert done.stdout.split() == ["processes", "3", "0", "dask", "3", "0"]
    assert done.stderr.count("Starting temporary server") == 1, done.stderr[-4000:]
    for runner in ("processes", "dask"):
        assert len(list((tmp_path / "out" / runner).glob("*.h5"))) == 3
