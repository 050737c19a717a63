"""``h5pipe cache --position-ids derived``: keyed like every other setting (a rerun with the other
choice is refused, then recomputed with --overwrite); ``h5pipe verify`` accepts the folder and
``h5pipe inspect`` says the position ids are derived."""

from __future__ import annotations

import h5py
import pytest
from typer.testing import CliRunner

from flows.cache_flow import cache_flow
from flows.cli import app
from tests.flows.test_cache_flow import params


def test_the_other_choice_is_refused_then_recomputed_with_overwrite(gpt2_path, c4_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out, pack_size=256, pad_value=0))
    derived = params(gpt2_path, c4_chunks, out, pack_size=256, pad_value=0, position_ids="derived")
    refused = cache_flow(derived, return_state=True)
    assert refused.is_failed()
    with pytest.raises(Exception, match="other settings.*overwrite"):
        refused.result()
    derived.overwrite = True
    assert cache_flow(derived)["cached"] == [False, False, False]
    assert cache_flow(derived)["cached"] == [True, True, True]
    with h5py.File(out / "train_chunk_0.h5") as f:
        assert "position_ids" not in f and f.attrs["position_ids_storage"] == "derived"


def test_the_cli_flag_writes_a_folder_verify_accepts(tmp_path, llamafactory, gpt2_path):
    out = tmp_path / "o"
    args = [
        "cache",
        "--input",
        str(llamafactory / "c4_demo.jsonl"),
        "--output",
        str(out),
        "--tokenizer",
        str(gpt2_path),
    ]
    args += ["--eos-token", "<|endoftext|>", "--pack-size", "256", "--pad-value", "0", "--position-ids", "derived"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    with h5py.File(out / "c4_demo.h5") as f:
        assert "position_ids" not in f
    verified = CliRunner().invoke(app, ["verify", str(out)])
    assert verified.exit_code == 0, verified.output
    shown = CliRunner().invoke(app, ["inspect", str(out / "c4_demo.h5")])
    assert shown.exit_code == 0 and "position_ids: not stored, derived from cu_seqlens" in shown.output


def test_derived_without_packing_is_a_bad_argument(tmp_path, llamafactory, gpt2_path):
    args = ["cache", "--input", str(llamafactory / "c4_demo.jsonl"), "--output", str(tmp_path / "o")]
    args += ["--tokenizer", str(gpt2_path), "--eos-token", "<|endoftext|>", "--position-ids", "derived"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 2 and "pack_size" in result.output
