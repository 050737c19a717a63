"""Worker processes get one group task per worker (flows/grouped.py): the files are the ones
threads write, and each chunk keeps its Prefect cache entry, so either runner finds the other's."""

from __future__ import annotations

import hashlib
import json

import pytest

from flows import batching
from flows.batching import worker_groups
from flows.cache_flow import cache_flow
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import params, write_chunks


def test_worker_groups_keep_order_and_split_the_bytes_evenly():
    groups = worker_groups([10] * 40, 2)
    assert groups == [list(range(20)), list(range(20, 40))]
    assert worker_groups([10] * 5, 2) == [[0, 1, 2], [3, 4]]
    assert worker_groups([10] * 7, 3) == [[0, 1, 2], [3, 4], [5, 6]]
    assert worker_groups([30, 1, 1, 1, 1, 1], 2) == [[0], [1, 2, 3, 4, 5]]  # 30 of 35 bytes, then the rest


def test_worker_groups_never_make_more_groups_than_chunks_or_workers():
    assert worker_groups([7], 4) == [[0]]
    assert worker_groups([0, 0, 0], 2) == [[0], [1, 2]]
    assert len(worker_groups([1] * 100, 3)) == 3


@pytest.fixture()
def five_chunks(tmp_path, llamafactory):
    return write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 5)


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.h5"))}


def job(gpt2_path, inputs, output, runner: str, trust: bool = True):
    run = {"task_runner": runner, "max_workers": 2, "trust_stamps": trust}
    return params(gpt2_path, inputs, output, pack_size=256, pad_value=0, run=run)


@pytest.mark.slow
def test_processes_write_what_threads_write_and_each_runner_reuses_the_others_cache(
    gpt2_path, five_chunks, tmp_path, monkeypatch
):
    monkeypatch.setattr(batching, "SMALL_CHUNK_BYTES", 0)  # threads: a task per chunk, as for chunks of 64 MB+
    monkeypatch.setattr(batching, "TASK_BYTES", 0)
    threads = cache_flow(job(gpt2_path, five_chunks, tmp_path / "threads", "threads"))
    processes = cache_flow(job(gpt2_path, five_chunks, tmp_path / "processes", "processes"))
    assert processes["cached"] == [False] * 5 and len(digests(tmp_path / "processes")) == 5
    assert digests(tmp_path / "processes") == digests(tmp_path / "threads")
    assert processes["summary"]["tokens_written"] == threads["summary"]["tokens_written"] > 0
    entries = json.loads((tmp_path / "processes" / "h5pipe-manifest.json").read_text())["entries"]
    assert len(entries) == 5

    # not trusting the stamps, every chunk goes through its tasks: Prefect's cache answers across runners
    before = digests(tmp_path / "processes")
    again = cache_flow(job(gpt2_path, five_chunks, tmp_path / "processes", "threads", trust=False))
    back = cache_flow(job(gpt2_path, five_chunks, tmp_path / "threads", "processes", trust=False))
    assert again["cached"] == [True] * 5 == back["cached"]
    assert digests(tmp_path / "processes") == before == digests(tmp_path / "threads")
    assert [c["sha256"] for c in back["chunks"]] == [c["sha256"] for c in threads["chunks"]]


@pytest.mark.slow
def test_small_chunks_on_threads_reuse_a_processes_run_from_the_manifest(gpt2_path, five_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(job(gpt2_path, five_chunks, out, "processes"))
    before = digests(out)
    assert batching.batches([1] * 5, 2) is not None  # threads would batch these chunks
    rerun = cache_flow(job(gpt2_path, five_chunks, out, "threads"))
    assert rerun["cached"] == [True] * 5 and digests(out) == before


@pytest.mark.slow
def test_a_changed_chunk_is_recomputed_alone_on_processes(gpt2_path, five_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(job(gpt2_path, five_chunks, out, "processes"))
    first = digests(out)
    changed = five_chunks / "train_chunk_3.jsonl"
    lines = changed.read_text(encoding="utf-8").splitlines(keepends=True)
    changed.write_text("".join(lines[:-1]), encoding="utf-8")  # one row fewer
    rerun = cache_flow(job(gpt2_path, five_chunks, out, "processes", trust=False))
    assert rerun["cached"] == [True, True, True, False, True]
    now = digests(out)
    assert {n for n in now if now[n] != first[n]} == {"train_chunk_3.h5"}
    assert rerun["chunks"][3]["rows_read"] == len(lines) - 1
