"""Chunks under TASK_BYTES share group task runs on threads (flows/batching.py ``task_groups``):
the files are the ones a task run per chunk writes, each chunk keeps its Prefect cache entry and
its manifest entry, and the server records one task run per group, named after its chunks."""

from __future__ import annotations

import hashlib
import json

import pytest

from flows import batching
from flows.batching import TASK_BYTES, shares_tasks, task_groups
from flows.cache_flow import cache_flow
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import params, write_chunks
from tests.flows.test_cache_plan import task_run_names

MB = 1 << 20


def test_ten_mb_chunks_go_in_groups_of_about_task_bytes_a_multiple_of_the_workers():
    sizes = [10 * MB] * 42  # the benchmark's 420 MB job
    groups = task_groups(sizes, 2)
    assert [k for g in groups for k in g] == list(range(42))  # in order, each chunk once
    assert len(groups) == 4  # 420 MB / (2 workers x 128 MB) -> 2 rounds of 2
    assert all(sum(sizes[k] for k in g) <= TASK_BYTES for g in groups)
    assert shares_tasks(sizes, 2)


def test_each_chunk_keeps_its_own_task_run_where_grouping_saves_nothing():
    assert not shares_tasks([10 * MB] * 4, 2)  # two chunks per worker or fewer
    assert not shares_tasks([10 * MB] * 9 + [TASK_BYTES], 2)  # one chunk is big enough on its own
    assert not shares_tasks([10 * MB] * 9 + [None], 2)  # a size is unknown (no stamp)
    assert not shares_tasks([TASK_BYTES - 1] * 9, 2)  # 9 groups of one: no task run saved
    assert len(task_groups([MB] * 5, 2)) == 2  # one round: a group per worker


@pytest.fixture()
def seven_chunks(tmp_path, llamafactory):
    return write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 7)


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.h5"))}


def run(p) -> tuple[dict, list[str]]:
    state = cache_flow(p, return_state=True)
    return state.result(), task_run_names(state.state_details.flow_run_id)


def job(gpt2_path, inputs, output, trust: bool = True):
    run = {"task_runner": "threads", "max_workers": 2, "trust_stamps": trust}
    return params(gpt2_path, inputs, output, pack_size=256, pad_value=0, run=run)


@pytest.mark.slow
def test_grouped_chunks_write_what_a_task_per_chunk_writes_and_share_its_cache(
    gpt2_path, seven_chunks, tmp_path, monkeypatch
):
    monkeypatch.setattr(batching, "SMALL_CHUNK_BYTES", 0)  # these chunks are small: no small-chunk batches
    monkeypatch.setattr(batching, "TASK_BYTES", 0)
    single, single_tasks = run(job(gpt2_path, seven_chunks, tmp_path / "single"))
    assert single_tasks == ["cache-chunk"] * 7

    sizes = [p.stat().st_size for p in sorted(seven_chunks.glob("*.jsonl"), key=lambda p: int(p.stem.split("_")[-1]))]
    monkeypatch.setattr(batching, "TASK_BYTES", sum(sizes) // 4 + 1)  # 2 rounds of 2 workers: 4 groups
    expected = task_groups(sizes, 2)
    assert len(expected) == 4
    grouped, grouped_tasks = run(job(gpt2_path, seven_chunks, tmp_path / "grouped"))
    names = [
        f"cache train_chunk_{g[0]}.jsonl" + (f" .. train_chunk_{g[-1]}.jsonl ({len(g)} chunks)" if len(g) > 1 else "")
        for g in expected
    ]
    assert grouped_tasks == sorted(names)  # one task run per group, named by its chunks
    assert grouped["cached"] == [False] * 7
    assert digests(tmp_path / "grouped") == digests(tmp_path / "single") and len(digests(tmp_path / "single")) == 7
    assert grouped["summary"]["tokens_written"] == single["summary"]["tokens_written"] > 0
    entries = json.loads((tmp_path / "grouped" / "h5pipe-manifest.json").read_text())["entries"]
    assert len(entries) == 7

    # not trusting the stamps, every chunk goes to its task again: Prefect's cache answers per chunk
    before = digests(tmp_path / "grouped")
    again, _ = run(job(gpt2_path, seven_chunks, tmp_path / "grouped", trust=False))
    assert again["cached"] == [True] * 7 and digests(tmp_path / "grouped") == before
    monkeypatch.setattr(batching, "TASK_BYTES", 0)
    back, back_tasks = run(job(gpt2_path, seven_chunks, tmp_path / "single", trust=False))
    assert back["cached"] == [True] * 7 and back_tasks == ["cache-chunk"] * 7
    assert [c["sha256"] for c in back["chunks"]] == [c["sha256"] for c in grouped["chunks"]]


@pytest.mark.slow
def test_a_bad_chunk_fails_its_group_and_the_other_groups_are_kept(gpt2_path, seven_chunks, tmp_path, monkeypatch):
    monkeypatch.setattr(batching, "SMALL_CHUNK_BYTES", 0)
    sizes = [p.stat().st_size for p in sorted(seven_chunks.glob("*.jsonl"), key=lambda p: int(p.stem.split("_")[-1]))]
    monkeypatch.setattr(batching, "TASK_BYTES", sum(sizes) // 4 + 1)
    groups = task_groups(sizes, 2)
    failing = next(g for g in groups if len(g) > 1)  # a group of several chunks, one of them bad
    bad = failing[-1]
    with open(seven_chunks / f"train_chunk_{bad}.jsonl", "a", encoding="utf-8") as f:
        f.write('{"text": 7}\n')  # not a string: refused with on_error=raise
    p = job(gpt2_path, seven_chunks, tmp_path / "out").model_copy(update={"on_error": "raise"})
    state = cache_flow(p, return_state=True)
    assert state.is_failed()
    message = str(state.result(raise_on_failure=False))
    assert f"{len(failing)} of 7 chunks failed" in message and f"train_chunk_{bad}.jsonl" in message
    entries = json.loads((tmp_path / "out" / "h5pipe-manifest.json").read_text())["entries"]
    assert sorted(entries) == sorted(f"train_chunk_{k}.h5" for g in groups if g != failing for k in g)


@pytest.mark.slow
def test_groups_hashed_before_a_lasting_read_failure_still_finish_and_commit(
    gpt2_path, seven_chunks, tmp_path, monkeypatch
):
    """Each group is submitted once its own chunks are hashed; the last chunk failing its hash for
    good fails the run, naming that file, after the groups already running are committed."""
    from tests.faults import FlakyFileSystem

    monkeypatch.setattr(batching, "SMALL_CHUNK_BYTES", 0)
    sizes = [p.stat().st_size for p in sorted(seven_chunks.glob("*.jsonl"), key=lambda p: int(p.stem.split("_")[-1]))]
    monkeypatch.setattr(batching, "TASK_BYTES", sum(sizes) // 4 + 1)
    groups = task_groups(sizes, 2)
    FlakyFileSystem.reset()
    FlakyFileSystem.fail_reads("train_chunk_6.jsonl", 1, PermissionError)  # not transient: no retry
    try:
        state = cache_flow(job(gpt2_path, f"flaky://{seven_chunks}", tmp_path / "out"), return_state=True)
    finally:
        FlakyFileSystem.reset()
    assert state.is_failed()
    assert "train_chunk_6.jsonl" in str(state.result(raise_on_failure=False))
    entries = json.loads((tmp_path / "out" / "h5pipe-manifest.json").read_text())["entries"]
    assert sorted(entries) == sorted(f"train_chunk_{k}.h5" for g in groups[:-1] for k in g)
