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
