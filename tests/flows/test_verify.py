"""h5pipe verify on the outputs of a real run: clean passes, each kind of damage is named."""

from __future__ import annotations

import json
import shutil

import h5py
from typer.testing import CliRunner

from flows.cache_flow import cache_flow
from flows.cli import app
from flows.params import CacheParams
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import write_chunks

runner = CliRunner()


def run_cache(tmp_path, llamafactory, gpt2_path, **kw):
    chunks = write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 4)
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    cache_flow(CacheParams(input=str(chunks), output=str(tmp_path / "out"), tokenizer=tokenizer, **kw))
    return tmp_path / "out"


def verify(folder):
    result = runner.invoke(app, ["verify", str(folder)])
    return result.exit_code, result.stdout


def test_clean_outputs_verify(tmp_path, llamafactory, gpt2_path):
    out = run_cache(tmp_path, llamafactory, gpt2_path, pack_size=128, pad_value=0)
    code, text = verify(out)
    assert code == 0, text
    assert "4 file(s) checked, 0 bad" in text


def test_each_kind_of_damage_is_reported(tmp_path, llamafactory, gpt2_path):
    out = run_cache(tmp_path, llamafactory, gpt2_path)
    with open(out / "train_chunk_0.h5", "r+b") as f:  # truncated
        f.truncate(4096)
    with h5py.File(out / "train_chunk_1.h5", "r+") as f:  # offsets that do not end at the data length
        f["sequence_offsets"][-1] = f["sequence_offsets"][-1] + 5
    shutil.copy(out / "train_chunk_2.h5", out / "stray.h5")  # not in the manifest
    manifest = json.loads((out / "h5pipe-manifest.json").read_text())
    del manifest["entries"]["train_chunk_3.h5"]  # unlisted
    (out / "h5pipe-manifest.json").write_text(json.dumps(manifest))
    code, text = verify(out)
    assert code == 1
    lines = {line.split(":")[0].strip(): line for line in text.splitlines()[1:]}
    assert set(lines) == {"train_chunk_0.h5", "train_chunk_1.h5", "stray.h5", "train_chunk_3.h5"}
    assert "unreadable" in lines["train_chunk_0.h5"]
    assert "sequence_offsets: not monotone" in lines["train_chunk_1.h5"]
    assert "differs from the manifest" in lines["train_chunk_1.h5"]
    assert "not in the manifest" in lines["stray.h5"] and "not in the manifest" in lines["train_chunk_3.h5"]


def test_partial_file_without_the_completion_mark_is_reported(tmp_path, llamafactory, gpt2_path):
    out = run_cache(tmp_path, llamafactory, gpt2_path)
    with h5py.File(out / "train_chunk_2.h5", "r+") as f:
        del f.attrs["complete"]
    code, text = verify(out)
    assert code == 1 and "train_chunk_2.h5: not complete" in text


def test_a_folder_whose_run_did_not_commit_is_reported(tmp_path, llamafactory, gpt2_path):
    """Every file may be whole and listed while the run that writes the folder has not finished:
    readers refuse such a folder, and verify passed it (exit 0)."""
    out = run_cache(tmp_path, llamafactory, gpt2_path)
    manifest = json.loads((out / "h5pipe-manifest.json").read_text())
    (out / "h5pipe-manifest.json").write_text(json.dumps({**manifest, "complete": False}))
    code, text = verify(out)
    assert code == 1 and "h5pipe-manifest.json: not committed" in text
    (out / "h5pipe-manifest.json").write_text(json.dumps({**manifest, "dropping": [str(out / "gone.h5")]}))
    code, text = verify(out)
    assert code == 1 and "interrupted while removing 1 file(s)" in text


def test_the_manifest_says_incomplete_before_a_rerun_replaces_an_output(tmp_path, llamafactory, gpt2_path, monkeypatch):
    """--overwrite with another pack_size: when the first new output is in place, the manifest
    must already say the folder is being written (it said complete, with the old settings, until
    the first chunk was recorded, and a reader took the folder as one set)."""
    import tasks.cache
    from pipeline_core.commit.manifest import load_manifest

    out = run_cache(tmp_path, llamafactory, gpt2_path, pack_size=128, pad_value=0)
    seen = []
    result_of = tasks.cache._result

    def watched(stats, storage_options):
        seen.append(load_manifest(str(out)).complete)  # the output is published; its record is not yet
        return result_of(stats, storage_options)

    monkeypatch.setattr(tasks.cache, "_result", watched)
    run_cache(tmp_path, llamafactory, gpt2_path, pack_size=256, pad_value=0, overwrite=True)
    assert seen and not any(seen)
    assert load_manifest(str(out)).complete and verify(out)[0] == 0


def test_a_missing_folder_is_reported_not_a_traceback(tmp_path):
    code, text = verify(tmp_path / "nowhere")
    assert code == 1 and "no such folder" in text
