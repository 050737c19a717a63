"""Unchanged chunks are reused from the manifest without a task; anything else still runs one."""

from __future__ import annotations

import os
import time

import pytest
from prefect.client.orchestration import get_client
from prefect.client.schemas.filters import FlowRunFilter, FlowRunFilterId

from flows.cache_flow import cache_flow
from pipeline_core import read_attrs
from tasks.retry import TransientIOError
from tests.flows.test_cache_flow import mtimes, params


def run(p) -> tuple[dict, list[str]]:
    """The flow's result and the names of the task runs it made."""
    state = cache_flow(p, return_state=True)
    return state.result(), task_run_names(state.state_details.flow_run_id)


def task_run_names(flow_run_id, settle: float = 0.5, timeout: float = 30.0) -> list[str]:
    """The server records task runs from events a moment after the flow returns (longer on a busy
    machine): read until two reads ``settle`` seconds apart agree."""
    this_run = FlowRunFilter(id=FlowRunFilterId(any_=[flow_run_id]))
    names, deadline = None, time.monotonic() + timeout
    with get_client(sync_client=True) as client:
        while True:
            runs = client.read_task_runs(flow_run_filter=this_run)
            found = sorted(t.name.rsplit("-", 1)[0] for t in runs)  # "cache-chunk-3f2" -> "cache-chunk"
            if found == names or time.monotonic() > deadline:
                return found
            names = found
            time.sleep(settle)


def test_unchanged_rerun_submits_no_task(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out", pack_size=256, pad_value=0)
    first, first_tasks = run(p)
    assert first_tasks == ["cache-chunk"] * 3  # the flow hashed the chunks itself
    before = mtimes(tmp_path / "out")
    manifest = tmp_path / "out" / "h5pipe-manifest.json"
    written = manifest.stat().st_mtime_ns
    second, second_tasks = run(p)
    assert second_tasks == []
    assert second["cached"] == [True, True, True]
    assert second["chunks"] == first["chunks"]
    assert second["summary"]["tokens_written"] == first["summary"]["tokens_written"]
    assert mtimes(tmp_path / "out") == before
    assert manifest.stat().st_mtime_ns == written  # nothing changed, so nothing was rewritten


def test_touched_input_is_hashed_again_then_reused(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    run(p)
    touched = c4_chunks / "train_chunk_1.jsonl"
    os.utime(touched, ns=(touched.stat().st_atime_ns, touched.stat().st_mtime_ns + 5_000_000_000))
    again, tasks = run(p)
    assert again["cached"] == [True, True, True]  # same bytes: a Prefect cache hit
    assert tasks == ["cache-chunk"]  # only the touched chunk ran a task
    third, tasks = run(p)  # the manifest now holds the new stamp
    assert tasks == [] and third["cached"] == [True, True, True]


def test_rewritten_output_is_not_reused(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    run(p)
    out = tmp_path / "out" / "train_chunk_0.h5"
    data = bytearray(out.read_bytes())
    data[-1] ^= 0xFF  # same size, other bytes: only the sha256 check sees it
    out.write_bytes(bytes(data))
    again, tasks = run(p)
    # the chunk ran its task; its Prefect hit failed verification, so it was hashed and built again
    assert tasks == ["cache-chunk", "cache-chunk", "hash-chunk"]
    assert again["cached"] == [False, True, True]
    assert read_attrs(str(out))["rows_read"] == 100


def test_an_output_rewritten_after_its_task_keeps_the_stamp_of_its_hash(gpt2_path, c4_chunks, tmp_path, monkeypatch):
    """A same-size rewrite between a task's sha256 and the end of the run: the manifest must not
    pair the rewrite's stamp with the task's sha256, or the next run would trust the rewrite."""
    import flows.cache_flow

    out = tmp_path / "out" / "train_chunk_0.h5"
    stamp_outputs = flows.cache_flow.stamp_outputs

    def rewrite_then_stamp(*args, **kwargs):
        data = bytearray(out.read_bytes())
        data[-1] ^= 0xFF  # same size, other bytes
        out.write_bytes(bytes(data))
        return stamp_outputs(*args, **kwargs)

    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    monkeypatch.setattr(flows.cache_flow, "stamp_outputs", rewrite_then_stamp)
    first, _ = run(p)
    monkeypatch.setattr(flows.cache_flow, "stamp_outputs", stamp_outputs)
    assert first["cached"] == [False, False, False]
    again, tasks = run(p)
    assert again["cached"][0] is False  # seen as changed, built again; before: reused as it was
    assert "hash-chunk" in tasks
    assert read_attrs(str(out))["rows_read"] == 100


def test_same_size_rewrite_with_restored_mtime_is_seen(gpt2_path, c4_chunks, tmp_path):
    """A same-size in-place rewrite with its mtime put back: the stamp's st_ctime_ns shows it (issue 17)."""
    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    run(p)
    chunk = c4_chunks / "train_chunk_2.jsonl"
    stat = chunk.stat()
    data = chunk.read_bytes()
    with open(chunk, "r+b") as f:
        f.write(data.replace(b" the ", b" THE ", 1))  # inside a JSON string: still valid, same size
    os.utime(chunk, ns=(stat.st_atime_ns, stat.st_mtime_ns))
    assert chunk.stat().st_size == stat.st_size
    trusted, _ = run(p)
    assert trusted["cached"] == [True, True, False]


def test_unchanged_outputs_are_not_read_again(gpt2_path, c4_chunks, tmp_path, monkeypatch):
    """Their stamps were recorded after they were written: equal stamps need no sha256."""
    import pipeline_core.commit.standing

    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    first, _ = run(p)
    assert all(c["output_stamp"] for c in first["chunks"])
    fail = lambda *a, **k: pytest.fail("an unchanged output was hashed")  # noqa: E731
    monkeypatch.setattr(pipeline_core.commit.standing, "file_digest", fail)
    second, tasks = run(p)
    assert tasks == [] and second["cached"] == [True, True, True]


def test_a_touched_output_is_hashed_once_then_known_by_its_new_stamp(gpt2_path, c4_chunks, tmp_path, monkeypatch):
    """Same bytes, new mtime: the next run hashes it and reuses it, and records the new stamp, so
    the run after that reads nothing."""
    import pipeline_core.commit.standing

    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    run(p)
    out = tmp_path / "out" / "train_chunk_1.h5"
    os.utime(out, ns=(out.stat().st_atime_ns, out.stat().st_mtime_ns + 5_000_000_000))
    hashed = []
    real = pipeline_core.commit.standing.file_digest
    monkeypatch.setattr(
        pipeline_core.commit.standing, "file_digest", lambda url, *a, **k: hashed.append(url) or real(url, *a, **k)
    )
    second, tasks = run(p)
    assert tasks == [] and second["cached"] == [True, True, True]
    assert hashed == [str(out)]
    third, tasks = run(p)
    assert tasks == [] and third["cached"] == [True, True, True]
    assert hashed == [str(out)]  # not hashed a second time


def test_unchanged_rerun_lists_the_outputs_once(gpt2_path, c4_chunks, tmp_path, monkeypatch):
    import flows.plan

    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    run(p)
    listed = []
    real = flows.plan.file_infos
    monkeypatch.setattr(
        flows.plan, "file_infos", lambda urls, storage: listed.append(list(urls)) or real(urls, storage)
    )
    second, _ = run(p)
    assert second["cached"] == [True, True, True]
    assert [urls for urls in listed if any(u.endswith(".h5") for u in urls)] == [
        [str(tmp_path / "out" / f"train_chunk_{i}.h5") for i in range(3)]
    ]


def test_unchanged_megatron_only_rerun_submits_no_task(gpt2_path, c4_chunks, tmp_path, caplog):
    """Megatron-only output has no .h5: the chunk stands for its first key's .idx in the manifest."""
    p = params(gpt2_path, c4_chunks, tmp_path / "out", output_format="megatron")

    def reused() -> int:
        """How many chunks the run's plan reused without a task, as its log line says."""
        (line,) = [r.getMessage() for r in caplog.records if "since the manifest's run" in r.getMessage()]
        caplog.clear()
        return int(line.split("; ")[1].split()[0])

    caplog.set_level("INFO", logger="prefect.flow_runs")
    first = cache_flow(p)
    assert reused() == 0
    assert [r["output_url"].rsplit("/", 1)[-1] for r in first["chunks"]] == [
        f"train_chunk_{i}_text_document.idx" for i in range(3)
    ]
    idx = sorted((tmp_path / "out").glob("*.idx"))
    before = {f.name: f.stat().st_mtime_ns for f in idx}
    second = cache_flow(p)
    assert reused() == 3
    assert second["cached"] == [True, True, True] and second["chunks"] == first["chunks"]
    assert {f.name: f.stat().st_mtime_ns for f in idx} == before
    (tmp_path / "out" / "train_chunk_1_text_document.idx").unlink()
    third = cache_flow(p)  # a missing output is never reused: that chunk runs its tasks again
    assert reused() == 2
    assert (tmp_path / "out" / "train_chunk_1_text_document.idx").exists()
    assert third["chunks"][1]["sha256"] == first["chunks"][1]["sha256"]


def test_megatron_only_chunks_resume_from_the_manifest_in_their_task(gpt2_path, c4_chunks, tmp_path):
    """With stamps not trusted and Prefect's results gone, each task still finds its .idx in the manifest."""
    import shutil

    p = params(gpt2_path, c4_chunks, tmp_path / "out", output_format="megatron", run={"trust_stamps": False})
    first = cache_flow(p)
    files = sorted((tmp_path / "out").glob("*_document.*"))
    assert len(files) == 6
    before = {f.name: f.stat().st_mtime_ns for f in files}
    shutil.rmtree(tmp_path / "out" / ".h5pipe")
    again = cache_flow(p)
    # the tasks ran and resumed: nothing rewritten, and the summary counts them as cached, not computed
    assert again["cached"] == [True, True, True]
    assert again["summary"]["cached_chunks"] == 3 and again["summary"]["tokens_per_second"] == 0
    assert {f.name: f.stat().st_mtime_ns for f in files} == before
    assert again["chunks"] == first["chunks"] and all("resumed" not in c for c in again["chunks"])


@pytest.mark.parametrize("trust_stamps", [True, False])
def test_a_lost_quarantine_file_is_written_again(gpt2_path, tmp_path, trust_stamps):
    """A chunk whose .errors.jsonl is gone is not done: neither the plan, a Prefect hit nor the
    task's manifest resume may reuse it."""
    from tests.flows.test_cache_flow import write_chunks

    rows = [{"text": f"row number {i}"} for i in range(20)] + [{"nope": 1}]
    folder = write_chunks(tmp_path / "pt", rows, 2)
    p = params(gpt2_path, folder, tmp_path / "out", run={"trust_stamps": trust_stamps})
    first = cache_flow(p)
    errors = tmp_path / "out" / "train_chunk_1.errors.jsonl"
    kept = errors.read_bytes()
    errors.unlink()
    again = cache_flow(p)
    assert errors.read_bytes() == kept
    assert again["cached"] == [True, False]
    assert again["chunks"][1]["sha256"] == first["chunks"][1]["sha256"]


def test_a_chunk_the_flow_cannot_read_is_hashed_by_its_own_task(gpt2_path, c4_chunks, tmp_path):
    """The flow hashes the chunks itself; one whose read fails there gets a hash-chunk task run,
    which retries the transient fault, and the outputs are those of a run without the fault."""
    from tests.faults import FlakyFileSystem

    FlakyFileSystem.reset()
    run(params(gpt2_path, f"flaky://{c4_chunks}", tmp_path / "clean"))  # the same input URLs, no fault
    FlakyFileSystem.fail_reads("train_chunk_1.jsonl", 2, TransientIOError)  # the flow's read, the task's first
    try:
        p = params(gpt2_path, f"flaky://{c4_chunks}", tmp_path / "out", run={"retry_delay": 0.01})
        flaky, tasks = run(p)
        assert FlakyFileSystem.read_attempts[str(c4_chunks / "train_chunk_1.jsonl")] == 4  # + retry + cache read
    finally:
        FlakyFileSystem.reset()
    assert tasks == ["cache-chunk"] * 3 + ["hash-chunk"]
    assert flaky["cached"] == [False, False, False]
    for name in ("train_chunk_0.h5", "train_chunk_1.h5", "train_chunk_2.h5"):
        assert (tmp_path / "out" / name).read_bytes() == (tmp_path / "clean" / name).read_bytes()


def test_a_lasting_read_failure_fails_only_that_chunk_and_names_it(gpt2_path, c4_chunks, tmp_path):
    from tests.faults import FlakyFileSystem

    FlakyFileSystem.reset()
    FlakyFileSystem.fail_reads("train_chunk_2.jsonl", 2, PermissionError)  # the flow's read and the task's
    try:
        p = params(gpt2_path, f"flaky://{c4_chunks}", tmp_path / "out", run={"retry_delay": 0.01})
        state = cache_flow(p, return_state=True)
        assert FlakyFileSystem.read_attempts[str(c4_chunks / "train_chunk_2.jsonl")] == 2  # not retried
    finally:
        FlakyFileSystem.reset()
    assert state.is_failed()
    with pytest.raises(Exception, match=r"1 of 3 chunks failed:\n.*train_chunk_2.jsonl: .*PermissionError"):
        state.result()
    assert sorted(p.name for p in (tmp_path / "out").glob("*.h5")) == ["train_chunk_0.h5", "train_chunk_1.h5"]
