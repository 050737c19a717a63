"""concat packing of sft can leave packs whose labels are all -100: the run summary counts them,
chunk by chunk, and the flow warns with the cure (expectations counted from the files themselves)."""

from __future__ import annotations

import numpy as np

from flows.cache_flow import cache_flow
from flows.reporting import untrained_warning
from pipeline_core.commit.verify import verify_output
from pipeline_core.formats.h5 import open_h5
from tests.flows.test_cache_flow import params, write_chunks

CHATML = {"strategy": "chatml", "strategy_kwargs": {"text_markers": True}}


def _untrained_in(path) -> int:
    with open_h5(str(path)) as f:
        return int(np.count_nonzero(~f["loss_mask"][...].any(axis=1)))


def test_the_summary_counts_packs_without_a_trained_token_and_warns(gpt2_path, tmp_path):
    rows = [{"query": f"question {i}?", "response": f"answer {i}."} for i in range(40)]
    rows[7]["query"] = "a prompt far longer than a pack " * 40
    rows[31]["query"] = "another long prompt " * 60
    folder = write_chunks(tmp_path / "sft", rows, 2)
    p = params(gpt2_path, folder, tmp_path / "out", processor="sft", pack_size=64, pad_value=0, **CHATML)
    result = cache_flow(p)
    by_chunk = [_untrained_in(tmp_path / "out" / f"train_chunk_{i}.h5") for i in range(2)]
    assert all(n > 0 for n in by_chunk)
    assert [c["untrained_packs"] for c in result["chunks"]] == by_chunk
    summary = result["summary"]
    assert summary["untrained_packs"] == sum(by_chunk)
    warning = untrained_warning(summary)
    assert warning.startswith(f"{sum(by_chunk)} of {summary['packs']} packs hold no trained token")
    assert "packing='bfd'" in warning


def test_no_count_and_no_warning_when_every_pack_trains(gpt2_path, tmp_path):
    rows = [{"query": f"question {i}?", "response": f"answer {i}. " * 20} for i in range(40)]
    folder = write_chunks(tmp_path / "sft", rows, 1)
    p = params(gpt2_path, folder, tmp_path / "out", processor="sft", pack_size=64, pad_value=0, **CHATML)
    summary = cache_flow(p)["summary"]
    assert _untrained_in(tmp_path / "out" / "train_chunk_0.h5") == 0
    assert "untrained_packs" not in summary and untrained_warning(summary) is None


def test_mindspeed_output_reports_its_packs_and_untrained_ones(gpt2_path, tmp_path):
    """MindSpeed's packed layout comes from the same packer: the same counts as the HDF5 run."""
    rows = [{"query": f"question {i}?", "response": f"answer {i}."} for i in range(40)]
    rows[7]["query"] = "a prompt far longer than a pack " * 40
    folder = write_chunks(tmp_path / "sft", rows, 1)
    common = {"processor": "sft", "pack_size": 64, "pad_value": 0, **CHATML}
    h5 = cache_flow(params(gpt2_path, folder, tmp_path / "h5", **common))["summary"]
    ms = cache_flow(params(gpt2_path, folder, tmp_path / "ms", output_format="mindspeed", **common))["summary"]
    assert ms["packs"] == h5["packs"] > 0 and ms["pack_utilisation"] == h5["pack_utilisation"]
    assert ms["untrained_packs"] == h5["untrained_packs"] == _untrained_in(tmp_path / "h5" / "train_chunk_0.h5")
    assert untrained_warning(ms) == untrained_warning(h5)
    assert verify_output(str(tmp_path / "ms")).problems == {}  # its Megatron pairs' structure included
