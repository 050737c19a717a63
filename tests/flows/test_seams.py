"""What one stage publishes is exactly what the next one reads (issue 17, defects 1, 3, 4)."""

from __future__ import annotations

import json
import shutil

import pytest

from flows.cache_flow import cache_flow
from flows.export_flow import export_flow
from flows.params import ExportParams
from pipeline_core.commit.verify import verify_output
from pipeline_core.loader.dataset import H5Dataset
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import params, write_chunks


def export(source, out, chunk_size=100):
    return export_flow(
        ExportParams(source=str(source), output=str(out), chunk_size=chunk_size, run={"retry_delay": 0.05})
    )


def manifest_names(folder):
    return sorted(json.loads((folder / "h5pipe-manifest.json").read_text())["entries"])


def test_inputs_with_the_same_name_are_refused_before_anything_is_written(gpt2_path, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")
    a = write_chunks(tmp_path / "a", rows[:100], 1) / "train_chunk_0.jsonl"
    b = write_chunks(tmp_path / "b", rows[100:200], 1) / "train_chunk_0.jsonl"
    out = tmp_path / "out"
    p = params(gpt2_path, str(a), out)
    p.input = [str(a), str(b)]
    state = cache_flow(p, return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=r"(?s)a/train_chunk_0.jsonl.*b/train_chunk_0.jsonl.*train_chunk_0"):
        state.result()
    assert not out.exists() or not any(out.iterdir())


def test_cache_reads_only_the_committed_chunks_of_an_export(gpt2_path, llamafactory, tmp_path):
    source = shutil.copy(llamafactory / "c4_demo.jsonl", tmp_path / "c4.jsonl")  # 300 rows
    exported = tmp_path / "exported"
    export(source, exported)
    partial = exported / ".train_chunk_3.jsonl.tmp-0123abcd-99999999-0123abcd"  # a killed export's temp
    partial.write_text('{"text": "half a chunk"}\n')
    (exported / "notes.jsonl").write_text('{"text": "not an export chunk"}\n')
    result = cache_flow(params(gpt2_path, exported, tmp_path / "out"))
    assert [c["input_url"].rsplit("/", 1)[-1] for c in result["chunks"]] == [
        "train_chunk_0.jsonl",
        "train_chunk_1.jsonl",
        "train_chunk_2.jsonl",
    ]
    assert result["summary"]["samples_written"] == 300


def test_listing_without_a_manifest_skips_hidden_and_temporary_names(gpt2_path, c4_chunks, tmp_path):
    (c4_chunks / ".train_chunk_3.jsonl.tmp-0123abcd-99999999-0123abcd").write_text('{"text": "partial"}\n')
    (c4_chunks / "_SUCCESS.jsonl").write_text('{"text": "marker"}\n')
    result = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "out"))
    assert len(result["chunks"]) == 3 and result["summary"]["samples_written"] == 300


def test_a_smaller_reexport_replaces_the_set_and_the_cache_follows(gpt2_path, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")
    big, small = tmp_path / "big.jsonl", tmp_path / "small.jsonl"
    big.write_text("".join(json.dumps(r) + "\n" for r in rows))
    small.write_text("".join(json.dumps(r) + "\n" for r in rows[:150]))
    exported, out = tmp_path / "exported", tmp_path / "out"
    export(big, exported)
    cache_flow(params(gpt2_path, exported, out))
    assert (out / "train_chunk_2.h5").exists()
    shutil.copy(small, big)  # the same source path, now 150 rows: 2 chunks
    export(big, exported)
    assert sorted(p.name for p in exported.glob("train_chunk_*.jsonl")) == [
        "train_chunk_0.jsonl",
        "train_chunk_1.jsonl",
    ]
    result = cache_flow(params(gpt2_path, exported, out))
    assert result["summary"]["samples_written"] == 150
    assert not (out / "train_chunk_2.h5").exists()
    assert manifest_names(out) == ["train_chunk_0.h5", "train_chunk_1.h5"]
    assert len(H5Dataset(out)) == 150
    assert verify_output(str(out)).ok


def test_h5dataset_reads_only_what_the_manifest_lists(gpt2_path, c4_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out))
    shutil.copy(out / "train_chunk_0.h5", out / "stray.h5")  # an output no manifest committed
    assert len(H5Dataset(out)) == 300
