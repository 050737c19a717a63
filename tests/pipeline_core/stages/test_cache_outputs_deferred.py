"""Deferred keys (loss_weight: kept only when fractional) and per-sample keys (media) in cache outputs.

The processors here are test doubles registered for this module: they add a float32 weight
aligned with each sequence and a UTF-8 JSON ``media`` value per sample, as the contract says.
"""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline_core import ProcessorFactory, cache_jsonl, load_h5, read_attrs
from pipeline_core.formats.h5 import open_h5
from pipeline_core.formats.megatron import IndexedReader
from pipeline_core.formats.ragged import Ragged
from pipeline_core.processors.dpo import DPOProcessor
from pipeline_core.processors.sft import SFTProcessor


def _weights(mask: Ragged, per_row: np.ndarray) -> Ragged:
    return Ragged(mask.values * np.repeat(per_row, mask.lengths).astype(np.float32), mask.offsets)


def _media(rows: list[dict], kept: np.ndarray) -> Ragged:
    values = [json.dumps(rows[i].get("images")).encode() if "images" in rows[i] else b"" for i in kept]
    return Ragged.from_lists([np.frombuffer(v, np.uint8) for v in values], dtype=np.uint8)


@ProcessorFactory.register("test_weighted_sft")
class WeightedSFT(SFTProcessor):
    deferred_keys = ("loss_weight",)

    def process_batch(self, rows):
        batch = super().process_batch(rows)
        per_row = np.array([rows[i].get("weight", 1.0) for i in batch.rows], dtype=np.float32)
        batch.samples["loss_weight"] = _weights(batch.samples["loss_mask"], per_row)
        batch.samples["media"] = _media(rows, batch.rows)
        return batch


@ProcessorFactory.register("test_weighted_dpo")
class WeightedDPO(DPOProcessor):
    deferred_keys = ("chosen_weight", "rejected_weight")

    def process_batch(self, rows):
        batch = super().process_batch(rows)
        per_row = np.array([rows[i].get("weight", 1.0) for i in batch.rows], dtype=np.float32)
        batch.samples["chosen_weight"] = _weights(batch.samples["chosen_mask"], per_row)
        batch.samples["rejected_weight"] = _weights(batch.samples["rejected_mask"], per_row / 2)
        return batch


def _rows(n: int, weight=lambda i: 1.0) -> list[dict]:
    rows = [
        {"query": f"question number {i}?", "response": f"answer {i} " * (1 + i % 7), "weight": weight(i)}
        for i in range(n)
    ]
    for i in range(0, n, 3):
        rows[i]["images"] = [f"img_{i}.png"]
    return rows


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def test_integer_weights_are_not_written(trained, tmp_path):
    processor = ProcessorFactory.create("test_weighted_sft", trained)
    [out] = cache_jsonl(_write(tmp_path / "a.jsonl", _rows(20)), tmp_path / "o", processor, output_format="both")
    assert set(load_h5(out)) == {"sequence", "loss_mask", "media"}
    assert read_attrs(out)["deferred_keys"] == []
    assert not (tmp_path / "o" / "a_loss_weight_document.bin").exists()
    assert sorted(p.name for p in (tmp_path / "o").iterdir() if p.name.startswith(".")) == []


def test_fractional_weights_are_kept_in_hdf5_and_megatron(trained, tmp_path):
    rows = _rows(30, weight=lambda i: 0.5 if i == 17 else 1.0)
    processor = ProcessorFactory.create("test_weighted_sft", trained)
    [out] = cache_jsonl(
        _write(tmp_path / "a.jsonl", rows), tmp_path / "o", processor, output_format="both", batch_size=7
    )
    loaded = load_h5(out)
    expected = processor.process_batch(rows).samples
    assert read_attrs(out)["deferred_keys"] == ["loss_weight"]
    for i in range(len(rows)):
        np.testing.assert_array_equal(loaded["loss_weight"][i].numpy(), expected["loss_weight"][i])
        assert loaded["loss_weight"][i].dtype.is_floating_point
    megatron = IndexedReader(tmp_path / "o" / "a_loss_weight_document")
    assert megatron.dtype == np.float32 and len(megatron) == len(rows)
    np.testing.assert_array_equal(megatron[17], expected["loss_weight"][17])
    # A rerun whose weights are all 0/1 leaves no stale weight files behind.
    _write(tmp_path / "a.jsonl", _rows(30))
    [out] = cache_jsonl(tmp_path / "a.jsonl", tmp_path / "o", processor, output_format="both")
    assert "loss_weight" not in load_h5(out)
    assert not any(p.name.startswith("a_loss_weight") for p in (tmp_path / "o").iterdir())


def test_unpacked_media_is_per_sample_json(trained, tmp_path):
    rows = _rows(10)
    [out] = cache_jsonl(
        _write(tmp_path / "a.jsonl", rows), tmp_path / "o", ProcessorFactory.create("test_weighted_sft", trained)
    )
    media = load_h5(out)["media"]
    assert len(media) == len(rows)
    for row, value in zip(rows, media):
        assert (json.loads(bytes(value.numpy())) if len(value) else None) == row.get("images")


@pytest.mark.parametrize("packing", ["concat", "bfd"])
def test_packed_weights_stay_aligned_and_media_lists_the_documents(trained, tmp_path, packing):
    rows = _rows(40, weight=lambda i: 0.25 * (1 + i % 4))
    processor = ProcessorFactory.create("test_weighted_sft", trained)
    [out] = cache_jsonl(
        _write(tmp_path / "a.jsonl", rows),
        tmp_path / "o",
        processor,
        pack_size=96,
        pad_value=0,
        packing=packing,
        batch_size=9,
    )
    expected = processor.process_batch(rows).samples
    by_tokens = {tuple(expected["sequence"][i]): i for i in range(len(rows))}
    with open_h5(out) as f:
        seq, weight, mask = f["sequence"][...], f["loss_weight"][...], f["loss_mask"][...]
        cu, cu_off = f["cu_seqlens"][...], f["cu_seqlens_offsets"][...]
        media, media_off = f["media"][...], f["media_offsets"][...]
    assert weight.dtype == np.float32 and weight.shape == seq.shape
    for p in range(len(seq)):
        bounds = cu[cu_off[p] : cu_off[p + 1]]
        listed = json.loads(bytes(media[media_off[p] : media_off[p + 1]]))
        assert len(listed) == len(bounds) - 1
        assert np.all(weight[p, bounds[-1] :] == 0.0)  # pads weigh nothing
        for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            np.testing.assert_array_equal(weight[p, a:b], weight[p, a:b] * mask[p, a:b])
            if packing == "bfd":  # whole documents: trace each back to its sample
                i = by_tokens[tuple(seq[p, a:b])]
                np.testing.assert_array_equal(weight[p, a:b], expected["loss_weight"][i])
                assert listed[j] == rows[i].get("images")
    if packing == "concat":
        np.testing.assert_array_equal(
            weight.reshape(-1)[: expected["loss_weight"].values.size], expected["loss_weight"].values
        )


def test_dpo_weights_pack_as_loss_weight_beside_their_documents(trained, tmp_path):
    rows = [{"query": f"q{i}", "chosen": f"good {i} " * 3, "rejected": f"bad {i}", "weight": 0.5} for i in range(25)]
    processor = ProcessorFactory.create("test_weighted_dpo", trained)
    [out] = cache_jsonl(
        _write(tmp_path / "d.jsonl", rows), tmp_path / "o", processor, pack_size=128, pad_value=0, packing="bfd"
    )
    assert read_attrs(out)["deferred_keys"] == ["loss_weight"]
    with open_h5(out) as f:
        weight, mask, cu, cu_off = (
            f["loss_weight"][...],
            f["loss_mask"][...],
            f["cu_seqlens"][...],
            f["cu_seqlens_offsets"][...],
        )
    for p in range(len(weight)):
        bounds = cu[cu_off[p] : cu_off[p + 1]]
        for j, (a, b) in enumerate(zip(bounds[:-1], bounds[1:])):
            scale = 0.5 if j % 2 == 0 else 0.25  # chosen, then its rejected
            np.testing.assert_array_equal(weight[p, a:b], mask[p, a:b] * np.float32(scale))
