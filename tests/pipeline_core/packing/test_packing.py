"""SequencePacker properties, checked with hypothesis against plain list arithmetic."""

import numpy as np
import pytest
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import ConfigError, SequencePacker
from pipeline_core.formats.ragged import Ragged

sequences = st.lists(st.lists(st.integers(0, 50_000), min_size=0, max_size=40), min_size=0, max_size=30)
pack_sizes = st.integers(1, 64)


def masks_for(seqs, seed):
    rng = np.random.default_rng(seed)
    return [rng.random(len(s)) < 0.5 for s in seqs]


@settings(max_examples=200, deadline=None)
@given(seqs=sequences, pack_size=pack_sizes)
def test_packs_are_full_and_concatenate_to_the_input(seqs, pack_size):
    packer = SequencePacker(pack_size, pad_value=-1)
    packs = packer.pack([np.asarray(s, dtype=np.int32) for s in seqs])
    flat = [t for s in seqs for t in s]
    n_packs = -(-len(flat) // pack_size)
    assert packs.shape == (n_packs, pack_size)
    got = packs.reshape(-1).tolist()
    assert got[: len(flat)] == flat
    assert all(v == -1 for v in got[len(flat) :])
    assert len(got) - len(flat) < pack_size  # only the tail is padded


@settings(max_examples=200, deadline=None)
@given(seqs=sequences.filter(bool), pack_size=pack_sizes, seed=st.integers(0, 2**16))
def test_masks_stay_aligned(seqs, pack_size, seed):
    masks = masks_for(seqs, seed)
    packer = SequencePacker(pack_size, pad_value=0)
    packed = packer.pack({"sequence": [np.asarray(s, np.int32) for s in seqs], "loss_mask": masks})
    flat_seq = [t for s in seqs for t in s]
    flat_mask = [bool(m) for ms in masks for m in ms]
    seq, mask = packed["sequence"].reshape(-1).tolist(), packed["loss_mask"].reshape(-1).tolist()
    assert packed["loss_mask"].dtype == torch.bool
    assert list(zip(seq, mask))[: len(flat_seq)] == list(zip(flat_seq, flat_mask))
    assert not any(mask[len(flat_seq) :])  # masks pad with False


@settings(max_examples=150, deadline=None)
@given(seqs=sequences, pack_size=pack_sizes, cuts=st.lists(st.integers(0, 30), max_size=5))
def test_incremental_feeding_equals_one_call(seqs, pack_size, cuts):
    one = SequencePacker(pack_size, pad_value=7).pack([np.asarray(s, np.int32) for s in seqs]).numpy()
    packer = SequencePacker(pack_size, pad_value=7)
    bounds = sorted({0, len(seqs), *[min(c, len(seqs)) for c in cuts]})
    parts = []
    for lo, hi in zip(bounds, bounds[1:]):
        batch = Ragged.from_lists(seqs[lo:hi])
        parts.append(packer.add({"sequence": batch})["sequence"])
    parts.append(packer.flush().get("sequence", np.zeros((0, pack_size), np.int32)))
    assert np.array_equal(np.concatenate(parts), one)
    assert packer.packs == len(one)


def test_dtype_is_unified_and_2d_input_rejected():
    packer = SequencePacker(4, pad_value=0)
    out = packer.pack([np.array([1, 2], np.int16), np.array([3, 4, 5], np.int64)])
    assert out.dtype == torch.int64 and out.tolist() == [[1, 2, 3, 4], [5, 0, 0, 0]]
    with pytest.raises(ValueError, match="1-D"):
        SequencePacker(4, pad_value=0).pack([np.zeros((2, 2))])


def test_no_packing_and_missing_pad():
    seqs = [torch.tensor([1, 2])]
    assert SequencePacker(0).pack(seqs) is seqs
    with pytest.raises(ConfigError, match="pad_value"):
        SequencePacker(8)


def test_misaligned_keys_rejected():
    with pytest.raises(ValueError, match="differ in length"):
        SequencePacker(4, pad_value=0).add({"sequence": np.arange(3), "loss_mask": np.ones(2, bool)})


def test_fill_counts_real_tokens():
    packer = SequencePacker(4, pad_value=0)
    packer.pack([np.arange(6)])
    assert packer.packs == 2 and packer.pad_tokens == 2 and packer.fill == 0.75
