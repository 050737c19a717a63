"""cache_flow against the real Prefect test server: content-keyed caching, verified hits, retries."""

from __future__ import annotations

import json
import os
import shutil

import numpy as np
import pytest

from flows.cache_flow import cache_flow
from flows.params import CacheParams
from pipeline_core import load_h5, read_attrs
from tests.conftest import load_json_or_jsonl
from tests.faults import FlakyFileSystem


def write_chunks(folder, rows, n_chunks):
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // n_chunks)
    for i in range(n_chunks):
        with open(folder / f"train_chunk_{i}.jsonl", "w", encoding="utf-8") as f:
            for r in rows[i * per : (i + 1) * per]:
                f.write(json.dumps(r, ensure_ascii=False) + "\n")
    return folder


def params(gpt2_path, input, output, **kw):
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    return CacheParams(input=str(input), output=str(output), tokenizer=tokenizer, **kw)


def mtimes(folder):
    return {p.name: p.stat().st_mtime_ns for p in sorted(folder.glob("*.h5"))}


def test_second_run_is_fully_cached_and_rewrites_nothing(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out", pack_size=256, pad_value=0)
    first = cache_flow(p)
    assert first["cached"] == [False, False, False]
    before = mtimes(tmp_path / "out")
    second = cache_flow(p)
    assert second["cached"] == [True, True, True]
    assert mtimes(tmp_path / "out") == before
    assert second["summary"]["samples_written"] == 300 == first["summary"]["samples_written"]
    assert 0 < first["summary"]["pack_utilisation"] <= 1
    assert 0 < first["summary"]["lower_bound_packs"] <= first["summary"]["packs"]
    record = json.loads((tmp_path / "out" / "h5pipe-run.json").read_text())
    assert record["config"]["pack_size"] == 256 and record["summary"]["cached_chunks"] == 3


def test_changed_content_recomputes_exactly_that_chunk(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    cache_flow(p)
    with open(c4_chunks / "train_chunk_1.jsonl", "a") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    again = cache_flow(p)
    assert again["cached"] == [True, False, True]
    assert read_attrs(str(tmp_path / "out" / "train_chunk_1.h5"))["rows_read"] == 101


def test_same_bytes_at_another_path_hit(gpt2_path, c4_chunks, tmp_path):
    cache_flow(params(gpt2_path, c4_chunks, tmp_path / "out"))
    moved = shutil.copytree(c4_chunks, tmp_path / "elsewhere")
    again = cache_flow(params(gpt2_path, moved, tmp_path / "out"))
    assert again["cached"] == [True, True, True]


@pytest.mark.parametrize("change", [{"pack_size": 128, "pad_value": 0}, {"tokenizer_bos": "<|endoftext|>"}])
def test_new_settings_or_tokenizer_recompute_all(gpt2_path, c4_chunks, tmp_path, change):
    cache_flow(params(gpt2_path, c4_chunks, tmp_path / "out"))
    p = params(
        gpt2_path, c4_chunks, tmp_path / "out", **{k: v for k, v in change.items() if not k.startswith("tokenizer")}
    )
    if "tokenizer_bos" in change:
        p.tokenizer.bos_token = change["tokenizer_bos"]
    refused = cache_flow(p, return_state=True)  # other settings into the same folder: refused
    assert refused.is_failed()
    with pytest.raises(Exception, match="other settings.*overwrite"):
        refused.result()
    p.overwrite = True
    assert cache_flow(p)["cached"] == [False, False, False]


def test_manifest_resumes_when_prefect_results_are_gone(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out", run={"trust_stamps": False})
    cache_flow(p)
    before = mtimes(tmp_path / "out")
    shutil.rmtree(tmp_path / "out" / ".h5pipe")  # the Prefect cache is lost; the manifest is not
    again = cache_flow(p)
    assert again["cached"] == [True, True, True]  # tasks ran, resumed from the manifest: not computed
    assert mtimes(tmp_path / "out") == before  # ... and rewrote nothing: verified manifest entries
    manifest = json.loads((tmp_path / "out" / "h5pipe-manifest.json").read_text())
    assert sorted(manifest["entries"]) == ["train_chunk_0.h5", "train_chunk_1.h5", "train_chunk_2.h5"]


def test_deleted_or_truncated_output_is_rebuilt(gpt2_path, c4_chunks, tmp_path):
    p = params(gpt2_path, c4_chunks, tmp_path / "out")
    cache_flow(p)
    out = tmp_path / "out"
    reference = load_h5(str(out / "train_chunk_2.h5"))["sequence"]
    os.remove(out / "train_chunk_0.h5")
    with open(out / "train_chunk_2.h5", "r+b") as f:
        f.truncate(1000)
    again = cache_flow(p)
    assert again["cached"] == [False, True, False]
    rebuilt = load_h5(str(out / "train_chunk_2.h5"))["sequence"]
    assert all(np.array_equal(a.numpy(), b.numpy()) for a, b in zip(rebuilt, reference))
    assert (out / "train_chunk_0.h5").exists()


def test_transient_write_errors_are_retried_without_duplicates(gpt2_path, c4_chunks, tmp_path):
    FlakyFileSystem.reset()
    FlakyFileSystem.fail("train_chunk_1.h5", times=2, error=ConnectionResetError)
    out = f"flaky://{tmp_path}/flaky-out"
    p = params(gpt2_path, c4_chunks, out, run={"retry_delay": 0.05, "result_storage": str(tmp_path / "results")})
    result = cache_flow(p)
    target = f"{tmp_path}/flaky-out/train_chunk_1.h5"
    assert FlakyFileSystem.attempts[target] == 3
    assert result["cached"] == [False, False, False]
    attrs = read_attrs(target)
    assert attrs["rows_read"] == attrs["samples_written"] == 100
    assert len(load_h5(target)["sequence"]) == 100  # written exactly once, no duplicate rows
    FlakyFileSystem.reset()


def test_non_transient_error_fails_the_flow_without_retries(gpt2_path, c4_chunks, tmp_path):
    FlakyFileSystem.reset()
    FlakyFileSystem.fail("train_chunk_2.h5", times=5, error=PermissionError)
    p = params(
        gpt2_path, c4_chunks, f"flaky://{tmp_path}/o", run={"retry_delay": 0.05, "result_storage": str(tmp_path / "r")}
    )
    state = cache_flow(p, return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=r"1 of 3 chunks failed:\n.*train_chunk_2.jsonl: PermissionError"):
        state.result()
    assert FlakyFileSystem.attempts[f"{tmp_path}/o/train_chunk_2.h5"] == 1
    FlakyFileSystem.reset()


def test_bad_row_under_raise_fails_with_file_and_line(gpt2_path, tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    (folder / "train_chunk_0.jsonl").write_text('{"text": "ok"}\n{"txt": "typo"}\n')
    state = cache_flow(params(gpt2_path, folder, tmp_path / "out", on_error="raise"), return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=r"train_chunk_0.jsonl:2: field 'text'"):
        state.result()


def test_artifacts_have_the_totals(gpt2_path, c4_chunks, tmp_path):
    from prefect.client.orchestration import get_client
    from prefect.client.schemas.filters import ArtifactFilter, ArtifactFilterFlowRunId

    state = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "out", pack_size=512, pad_value=0), return_state=True)
    run_id = state.state_details.flow_run_id
    with get_client(sync_client=True) as client:
        artifacts = client.read_artifacts(
            artifact_filter=ArtifactFilter(flow_run_id=ArtifactFilterFlowRunId(any_=[run_id]))
        )
    by_key = {a.key: a for a in artifacts}
    assert {"h5pipe-cache-chunks", "h5pipe-cache-summary", "h5pipe-cache-progress"} <= set(by_key)
    table = by_key["h5pipe-cache-chunks"].data
    table = json.loads(table) if isinstance(table, str) else table
    assert sum(row["rows"] for row in table) == 300
    assert sum(row["tokens"] for row in table) == state.result()["summary"]["tokens_written"]
    assert "| samples_written | 300 |" in by_key["h5pipe-cache-summary"].data
    assert float(by_key["h5pipe-cache-progress"].data) == 100.0


def test_bfd_packing_reports_utilisation_near_the_lower_bound(gpt2_path, llamafactory, tmp_path):
    rows = [
        {"query": r["instruction"] + ("\n" + r["input"] if r["input"] else ""), "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")
    ]
    folder = write_chunks(tmp_path / "sft", rows, 1)
    # GPT-2 has no ChatML control tokens: the markers are written as text, knowingly
    chatml = {"strategy": "chatml", "strategy_kwargs": {"text_markers": True}}
    p = params(
        gpt2_path, folder, tmp_path / "out", processor="sft", pack_size=1024, pad_value=0, packing="bfd", **chatml
    )
    summary = cache_flow(p)["summary"]
    assert summary["samples_written"] + summary["rows_skipped"] == len(rows)
    assert summary["packs"] <= 1.03 * summary["lower_bound_packs"]
    assert summary["pack_utilisation"] >= 0.95
    assert read_attrs(str(tmp_path / "out" / "train_chunk_0.h5"))["packing"] == "bfd"


def test_every_output_setting_reaches_the_files(gpt2_path, tmp_path):
    """Settings the cache key holds must also shape the file (the task once passed only four)."""
    rows = [{"text": f"First sentence {i}. Second one {i}."} for i in range(10)] + [{"text": "x" * 300}]
    folder = write_chunks(tmp_path / "pt", rows, 1)
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, folder, out, output_format="both", split_sentences=True, max_row_bytes=200))
    attrs = read_attrs(str(out / "train_chunk_0.h5"))
    assert attrs["output_format"] == "both" and bool(attrs["split_sentences"]) and attrs["max_row_bytes"] == 200
    assert (attrs["rows_read"], attrs["rows_skipped"], attrs["sentences_written"]) == (11, 1, 20)
    assert (out / "train_chunk_0_text_sentence.bin").stat().st_size > 0
    assert json.loads((out / "train_chunk_0.errors.jsonl").read_text())["line"] == 11
