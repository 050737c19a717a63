"""The fault matrix: SIGKILLs at random points of ``h5pipe run`` (export then cache), locally and on
moto's S3, each followed by a rerun, with re-exports of a smaller and a larger dataset into the same
folders between them (issue 17).

After every phase's completed rerun: both folders verify; the cache folder holds exactly the
source's rows, once each and in order (tokenized independently); ``H5Dataset`` reads only the
files the manifest commits (a stray ``.h5`` planted beside them is never read); and the JSONL
chunks equal a clean in-process export's, byte for byte.
"""

from __future__ import annotations

import filecmp
import os
import random
import re
import subprocess
import sys
import time

import numpy as np
import pytest
import yaml
from prefect.settings import PREFECT_API_URL

from pipeline_core.commit.manifest import load_manifest
from pipeline_core.commit.verify import verify_output
from pipeline_core.loader.dataset import H5Dataset
from pipeline_core.stages.export import export_dataset
from tests.conftest import ROOT
from tests.reliability.helpers import EOS, expected_sequences, write_jsonl

KILLS_PER_PHASE = 5  # x 2 phases x 2 stores = 20 SIGKILLs


def launch(config_path, env) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-c", "from flows.cli import main; main()", "run", str(config_path)],
        cwd=ROOT,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        text=True,
    )


def run_to_end(config_path, env) -> float:
    started = time.monotonic()
    process = launch(config_path, env)
    _, err = process.communicate(timeout=600)
    assert process.returncode == 0, err[-4000:]
    return time.monotonic() - started


def kill_at(config_path, env, after: float) -> None:
    process = launch(config_path, env)
    try:
        process.wait(timeout=after)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait(timeout=30)
    process.stderr.close()


@pytest.fixture(params=["local", "s3"])
def store(request, tmp_path):
    """(output root URL, storage options dict for fsspec, the run.storage of the config)."""
    if request.param == "local":
        return str(tmp_path / "store"), None, {}
    bucket, options = request.getfixturevalue("s3_bucket")
    return bucket, options, {"endpoint_url": options["endpoint_url"]}


@pytest.mark.slow
def test_random_sigkills_with_reexports_converge_to_a_clean_run(store, tmp_path, gpt2, gpt2_path, c4_rows, request):
    root, options, storage = store
    jsonl, h5 = f"{root}/jsonl", f"{root}/h5"
    source = tmp_path / "src.jsonl"
    config = {
        "flow": "pipeline",
        "export": {"source": str(source), "output": jsonl, "chunk_size": 40, "run": {"storage": storage}},
        "cache": {
            "output": h5,
            "tokenizer": {"path": str(gpt2_path), "eos_token": EOS},
            "run": {"storage": storage, "retry_delay": 0.05},
        },
    }
    config_path = tmp_path / "run.yaml"
    config_path.write_text(yaml.safe_dump(config), encoding="utf-8")
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(ROOT)}
    rng = random.Random(f"fault-matrix-{request.node.callspec.id}")

    write_jsonl(source, c4_rows[:200])
    elapsed = run_to_end(config_path, env)
    plant_stray(h5, options)
    kills = 0
    for rows in (c4_rows[:70], c4_rows[:300]):  # re-exports of a smaller, then a larger dataset
        write_jsonl(source, rows)
        for _ in range(KILLS_PER_PHASE):
            kill_at(config_path, env, rng.uniform(0.5, elapsed))  # the next launch is its rerun
            kills += 1
        run_to_end(config_path, env)
        check(jsonl, h5, options, rows, gpt2, tmp_path / f"clean-{len(rows)}", source)
    assert kills == 2 * KILLS_PER_PHASE


def plant_stray(h5: str, options) -> None:
    from pipeline_core.storage.fs import url_to_fs

    fs, path = url_to_fs(h5, options)
    fs.pipe_file(f"{path}/stray.h5", b"not committed by any run")


def check(jsonl: str, h5: str, options, rows: list[dict], gpt2, clean, source) -> None:
    for folder in (jsonl, h5):
        report = verify_output(folder, options)
        assert [p for p in report.problems if p != "stray.h5"] == [], report.lines()
    texts = [r["text"] for r in rows]
    dataset = H5Dataset(h5, storage_options=options, cache_dir=str(clean) + "-downloads")
    committed = load_manifest(h5, options).outputs(".h5")
    # a remote folder's local copies are named {content tag}-{name} (loader/downloads.py)
    names = [re.sub(r"^[0-9a-f]{16}-", "", p.rsplit("/", 1)[-1]) for p in dataset.paths]
    assert names == committed and "stray.h5" not in committed
    got = [dataset[i]["sequence"].tolist() for i in range(len(dataset))]
    want = expected_sequences(gpt2, texts)
    assert len(got) == len(want) and all(np.array_equal(a, b) for a, b in zip(got, want))
    export_dataset(str(source), str(clean), chunk_size=40)
    assert_same_chunks(jsonl, options, clean)


def assert_same_chunks(jsonl: str, options, clean) -> None:
    from pipeline_core.storage.fs import url_to_fs

    fs, path = url_to_fs(jsonl, options)
    names = load_manifest(jsonl, options).outputs(".jsonl")
    assert names == sorted((p.name for p in clean.glob("train_chunk_*.jsonl")), key=_natural)
    for name in names:
        local = clean / f"got-{name}"
        fs.get_file(f"{path}/{name}", str(local))
        assert filecmp.cmp(local, clean / name, shallow=False), name
    listed = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(path) if p.endswith(".jsonl"))
    assert [n for n in listed if n.startswith("train_chunk_")] == sorted(names), "a stale chunk was left"


def _natural(name: str):
    from pipeline_core.storage.fs import natural_key

    return natural_key(name)
