"""``h5pipe verify`` checks a packed file's contents: real packed outputs pass, and each kind of
damage a writer could do is reported naming the pack (files edited with h5py after writing)."""

from __future__ import annotations

import json
import shutil

import h5py
import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline_core import CacheOptions, ProcessorFactory, cache_file
from pipeline_core.commit.verify import h5_problems
from pipeline_core.formats.pack_check import boundary_problems
from tests.conftest import load_json_or_jsonl


def _write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return str(path)


@pytest.fixture()
def sft_packed(trained, llamafactory, tmp_path):
    rows = [
        {"query": r["instruction"], "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")[:120]
    ]
    processor = ProcessorFactory.create("sft", trained, max_length=200, overflow="truncate")
    options = CacheOptions(pack_size=256, pad_value=trained.pad_token_id, packing="bfd")
    return cache_file(_write(tmp_path / "a.jsonl", rows), str(tmp_path / "o"), processor, options).output_url


def _edited(url, tmp_path, edit) -> str:
    copy = str(tmp_path / "edited.h5")
    shutil.copy(url, copy)
    with h5py.File(copy, "r+") as f:
        edit(f)
    return copy


def _first_padded_pack(f) -> tuple[int, int]:
    """(pack, first pad column) of the first pack with padding."""
    offsets, cu = f["cu_seqlens_offsets"][...], f["cu_seqlens"][...]
    used = cu[offsets[1:] - 1]
    p = int(np.flatnonzero(used < f["sequence"].shape[1])[0])
    return p, int(used[p])


def test_real_packed_outputs_pass(sft_packed, gpt2, llamafactory, tmp_path):
    assert h5_problems(sft_packed) == []
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:50]
    concat = cache_file(
        _write(tmp_path / "c.jsonl", rows),
        str(tmp_path / "p"),
        ProcessorFactory.create("pt", gpt2),
        CacheOptions(pack_size=300, pad_value=0),
    )
    assert h5_problems(concat.output_url) == []


def _pad_id(f):
    p, col = _first_padded_pack(f)
    f["sequence"][p, col] = 7
    return p


def _pad_mask(f):
    p, col = _first_padded_pack(f)
    f["loss_mask"][p, col] = True
    return p


def _big_id(f):
    f["sequence"][3, 0] = f.attrs["vocab_size"]


def _position(f):
    f["position_ids"][5, 2] += 1


def _not_rising(f):
    offsets = f["cu_seqlens_offsets"][...]
    p = int(np.flatnonzero(np.diff(offsets) >= 3)[0])  # a pack of two documents or more
    f["cu_seqlens"][offsets[p] + 1] = f["cu_seqlens"][offsets[p] + 2]


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (_pad_id, "sequence is not pad_value"),
        (_pad_mask, "loss_mask is True on padding"),
        (_big_id, "pack 3: sequence holds ids outside [0, vocab_size"),
        (_position, "pack 5: position_ids differ from the ones cu_seqlens gives"),
        (_not_rising, "cu_seqlens does not strictly increase"),
    ],
)
def test_damage_is_reported_naming_the_pack(sft_packed, tmp_path, edit, message):
    with h5py.File(sft_packed) as f:
        assert f["sequence"].shape[0] > 5
    problems = h5_problems(_edited(sft_packed, tmp_path, edit))
    assert len(problems) == 1 and message in problems[0], problems


@st.composite
def packs(draw):
    size = draw(st.integers(1, 40))
    lengths = [draw(st.lists(st.integers(1, size), min_size=1, max_size=5)) for _ in range(draw(st.integers(0, 6)))]
    lengths = [ls for ls in lengths if sum(ls) <= size]
    cu = [np.concatenate([[0], np.cumsum(ls)]) for ls in lengths]
    offsets = np.concatenate([[0], np.cumsum([c.size for c in cu])]).astype(np.int64)
    flat = np.concatenate(cu) if cu else np.zeros(0, np.int64)
    return flat.astype(np.int64), offsets, size


@given(packs())
def test_boundaries_that_packers_make_pass_and_any_step_back_fails(layout):
    cu, offsets, size = layout
    assert boundary_problems(cu, offsets, size) == []
    for p in range(offsets.size - 1):
        first, last = int(offsets[p]), int(offsets[p + 1]) - 1
        bad = cu.copy()
        bad[last] = size + 1
        assert boundary_problems(bad, offsets, size) == [f"pack {p}: cu_seqlens ends past pack_size {size}"]
        if last > first:
            bad = cu.copy()
            bad[first + 1] = 0
            assert boundary_problems(bad, offsets, size) == [f"pack {p}: cu_seqlens does not strictly increase"]


def test_an_integer_key_that_is_no_token_id_is_held_to_0_on_padding_only(gpt2, llamafactory, tmp_path):
    """A custom processor's aligned int key (labels with -100) is padded with 0 by both packers:
    neither the vocabulary range nor pad_value applies to it (the file names its id keys)."""
    from pipeline_core.formats.ragged import Ragged
    from pipeline_core.processors.base import ProcessedBatch, Processor

    @ProcessorFactory.register("test_pack_check_labelled")
    class Labelled(Processor):
        groups = {"sequence": ("sequence", "labels")}

        def process_batch(self, rows):
            seq = self.tokenizer.encode_ragged([r["text"] for r in rows])
            labels = seq.values.astype(np.int32).copy()
            labels[seq.offsets[:-1]] = -100
            return ProcessedBatch({"sequence": seq, "labels": Ragged(labels, seq.offsets)}, np.arange(len(rows)))

    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:30]
    processor = ProcessorFactory.create("test_pack_check_labelled", gpt2, max_length=500, overflow="truncate")
    for packing in ("bfd", "concat"):
        options = CacheOptions(pack_size=512, pad_value=50256, packing=packing)
        out = cache_file(_write(tmp_path / "c.jsonl", rows), str(tmp_path / packing), processor, options).output_url
        assert h5_problems(out) == []
        with h5py.File(out) as f:
            assert json.loads(f.attrs["packed_id_keys"]) == ["sequence"] and (f["labels"][...] == -100).any()

        def damage(f):
            p, col = _first_padded_pack(f)
            f["labels"][p, col] = -100  # a label value, but not the packers' pad of 0

        [problem] = h5_problems(_edited(out, tmp_path, damage))
        assert "labels is not 0 on padding" in problem
