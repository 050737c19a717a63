"""An unchanged export rerun reuses its chunks from the manifest without a task (flows/plan.py)."""

from __future__ import annotations

import shutil

import pytest

from flows.export_flow import export_flow
from flows.params import ExportParams


@pytest.fixture()
def source(llamafactory, tmp_path):
    return shutil.copy(llamafactory / "c4_demo.jsonl", tmp_path / "c4.jsonl")  # 300 rows


@pytest.fixture()
def reused(caplog):
    """How many chunks the last run reused without a task, as its log line says."""
    caplog.set_level("INFO", logger="prefect.flow_runs")

    def count() -> int:
        (line,) = [r.getMessage() for r in caplog.records if "since the manifest's run" in r.getMessage()]
        caplog.clear()
        return int(line.split("; ")[1].split()[0])

    return count


def params(source, out, **run) -> ExportParams:
    return ExportParams(source=str(source), output=str(out), chunk_size=120, run={"retry_delay": 0.05, **run})


def mtimes(folder):
    """The chunks and the manifest (each run writes its own run record, h5pipe-run.json)."""
    files = [*sorted(folder.glob("*.jsonl")), folder / "h5pipe-manifest.json"]
    return {p.name: p.stat().st_mtime_ns for p in files}


def test_unchanged_export_rerun_submits_no_task_and_writes_nothing(source, tmp_path, reused):
    out = tmp_path / "out"
    first = export_flow(params(source, out))
    assert reused() == 0 and first["cached"] == [False, False, False]
    before = mtimes(out)
    assert sorted(before) == ["h5pipe-manifest.json", *(f"train_chunk_{i}.jsonl" for i in range(3))]  # no errors files
    second = export_flow(params(source, out))
    assert reused() == 3
    assert second["cached"] == [True, True, True] and second["chunks"] == first["chunks"]
    assert mtimes(out) == before


def test_a_missing_chunk_is_written_again_and_the_rest_reused(source, tmp_path, reused):
    out = tmp_path / "out"
    first = export_flow(params(source, out))
    reused()
    kept = (out / "train_chunk_1.jsonl").read_bytes()
    (out / "train_chunk_1.jsonl").unlink()
    again = export_flow(params(source, out))
    assert reused() == 2
    assert (out / "train_chunk_1.jsonl").read_bytes() == kept
    assert [c["sha256"] for c in again["chunks"]] == [c["sha256"] for c in first["chunks"]]


def test_a_changed_source_is_exported_again(source, tmp_path, reused):
    out = tmp_path / "out"
    export_flow(params(source, out))
    reused()
    with open(source, "a", encoding="utf-8") as f:
        f.write('{"text": "one more row"}\n')
    again = export_flow(params(source, out))
    assert reused() == 0
    assert again["cached"] == [False, False, False]
    assert again["summary"]["rows_out"] == 301


def test_untrusted_stamps_run_every_task(source, tmp_path, reused):
    out = tmp_path / "out"
    export_flow(params(source, out))
    reused()
    again = export_flow(params(source, out, trust_stamps=False))
    assert reused() == 0
    assert again["cached"] == [True, True, True]  # Prefect's cache hits, each verified by sha256
