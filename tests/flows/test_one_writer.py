"""Two runs into one folder: exactly one writes it, the other fails naming the holder (defect 2)."""

from __future__ import annotations

import json

import pytest
from prefect.settings import PREFECT_API_URL

from flows.cache_flow import cache_flow
from pipeline_core.commit.lock import LOCK, FolderLock
from pipeline_core.commit.verify import verify_output
from tests.flows.test_cache_flow import params
from tests.reliability.helpers import start_worker


@pytest.fixture(params=["local", "s3"])
def target(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out"), {}
    bucket, options = request.getfixturevalue("s3_bucket")
    return f"{bucket}/out", {"storage": {"endpoint_url": options["endpoint_url"]}}


def test_a_run_into_a_held_folder_fails_naming_the_holder(gpt2_path, c4_chunks, target):
    out, run = target
    p = params(gpt2_path, c4_chunks, out, pack_size=1024, pad_value=0, run={"retry_delay": 0.05, **run})
    with FolderLock(out, p.run.storage.to_fsspec()) as held:
        state = cache_flow(p, return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=rf"being written by pid {held.holder.pid} .*{LOCK}"):
        state.result()
    assert cache_flow(p)["summary"]["samples_written"] == 300  # released: the folder is writable again


def test_two_concurrent_runs_with_other_settings_one_succeeds(gpt2_path, c4_chunks, target):
    out, run = target
    env = {"PREFECT_API_URL": PREFECT_API_URL.value()}
    runs = [
        params(gpt2_path, c4_chunks, out, pack_size=size, pad_value=0, run={"retry_delay": 0.05, **run})
        for size in (2048, 1024)
    ]
    workers = [start_worker("cache-flow", p.model_dump_json(), env=env) for p in runs]
    codes = [w.wait(timeout=600) for w in workers]
    errors = [w.stderr.read() for w in workers]
    assert sorted(codes) == [0, 1], errors
    loser = errors[codes.index(1)]
    assert "being written by pid" in loser or "other settings" in loser, loser[-3000:]
    winner = runs[codes.index(0)]
    report = verify_output(out, winner.run.storage.to_fsspec() or None)
    assert report.ok, report.lines()
    from pipeline_core.storage.fs import join_url, url_to_fs

    fs, path = url_to_fs(join_url(out, "h5pipe-run.json"), winner.run.storage.to_fsspec() or None)
    assert json.loads(fs.cat_file(path))["config"]["pack_size"] == winner.pack_size
