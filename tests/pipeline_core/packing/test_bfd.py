"""Best-fit-decreasing packer: whole samples, aligned keys, document boundaries, utilisation."""

from __future__ import annotations

import json
import math
import os
from pathlib import Path

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.errors import ConfigError
from pipeline_core.packing.bfd import DPO_GROUPS, BfdPacker, pack_bfd
from pipeline_core.packing.packs import Packs, PackStats, position_ids_from_lengths

ALPACA = Path("/work/shared/fixtures/llamafactory/alpaca_en_demo.json")
PAD = -1


def _sample(sample_id: int, length: int) -> dict[str, np.ndarray]:
    """Tokens encode (sample, position) so every token is traceable; the mask is a fixed pattern."""
    return {
        "sequence": (sample_id * 10_000 + np.arange(length)).astype(np.int32),
        "loss_mask": (np.arange(length) * 7 + sample_id) % 3 == 0,
    }


def _pair(sample_id: int, chosen: int, rejected: int) -> dict[str, np.ndarray]:
    c, r = _sample(sample_id, chosen), _sample(sample_id, rejected)
    return {
        "chosen": c["sequence"],
        "chosen_mask": c["loss_mask"],
        "rejected": -r["sequence"] - 2,
        "rejected_mask": ~r["loss_mask"],
    }


def _documents(packs: Packs, p: int) -> list[dict[str, np.ndarray]]:
    cu = packs.cu_seqlens_of(p)
    return [{k: v[p, a:b] for k, v in packs.arrays.items()} for a, b in zip(cu[:-1], cu[1:], strict=True)]


def _check_layout(packs: Packs, pack_size: int) -> None:
    """position_ids restart at each cu_seqlens entry, and everything after the last is padding."""
    for p in range(len(packs)):
        cu = packs.cu_seqlens_of(p)
        assert cu[0] == 0 and np.all(np.diff(cu) > 0) and cu[-1] <= pack_size
        expected = np.zeros(pack_size, dtype=np.int32)
        expected[: cu[-1]] = position_ids_from_lengths(np.diff(cu))
        np.testing.assert_array_equal(packs.position_ids[p], expected)
        starts = np.flatnonzero(packs.position_ids[p, : cu[-1]] == 0)
        np.testing.assert_array_equal(starts, cu[:-1])
        assert np.all(packs.arrays["sequence"][p, cu[-1] :] == PAD)
        assert not packs.arrays["loss_mask"][p, cu[-1] :].any()
    assert packs.position_ids.dtype == np.uint16 and packs.cu_seqlens.dtype == np.int32  # pack_size <= 65536
    assert packs.cu_offsets.dtype == np.int64 and packs.cu_offsets.size == len(packs) + 1


def _unpacked(packs: Packs) -> dict[int, list[dict[str, np.ndarray]]]:
    """Documents per source sample id, in layout order."""
    by_sample: dict[int, list[dict[str, np.ndarray]]] = {}
    for p in range(len(packs)):
        for sample_id, doc in zip(packs.sample_ids_of(p), _documents(packs, p), strict=True):
            by_sample.setdefault(int(sample_id), []).append(doc)
    return by_sample


def test_position_ids_from_lengths():
    assert position_ids_from_lengths(np.array([3, 0, 2, 1])).tolist() == [0, 1, 2, 0, 1, 0]
    assert position_ids_from_lengths(np.array([], dtype=np.int64)).tolist() == []


def test_small_example_layout():
    samples = [_sample(i, n) for i, n in enumerate([3, 5, 2, 7, 1, 4])]
    packs, stats = pack_bfd(samples, 8, PAD)
    assert len(packs) == 3 == stats.lower_bound_packs
    # Longest first: 7 -> new A, 5 -> new B, 4 -> new C, 3 -> B (best fit), 2 -> C, 1 -> A.
    assert [packs.sample_ids_of(p).tolist() for p in range(3)] == [[3, 4], [1, 0], [5, 2]]
    assert stats.tokens == 22 and stats.utilisation == pytest.approx(22 / 24)
    _check_layout(packs, 8)


@settings(max_examples=60, deadline=None)
@given(
    lengths=st.lists(st.integers(0, 40), max_size=60),
    pack_size=st.integers(8, 32),
    window=st.integers(1, 12),
    keep_open=st.integers(0, 3),
    overflow=st.sampled_from(["drop", "truncate"]),
)
def test_every_token_lands_once_in_one_pack(lengths, pack_size, window, keep_open, overflow):
    samples = [_sample(i, n) for i, n in enumerate(lengths)]
    packs, stats = pack_bfd(samples, pack_size, PAD, window=window, keep_open=keep_open, overflow=overflow)
    _check_layout(packs, pack_size)
    by_sample = _unpacked(packs)
    kept = {i for i, n in enumerate(lengths) if n > 0 and (n <= pack_size or overflow == "truncate")}
    assert set(by_sample) == kept
    for i, docs in by_sample.items():
        assert len(docs) == 1  # never split, never duplicated
        want = {k: v[:pack_size] for k, v in samples[i].items()}
        for key in want:
            np.testing.assert_array_equal(docs[0][key], want[key])
    assert stats.tokens == sum(min(lengths[i], pack_size) for i in kept)
    assert stats.packs == len(packs) and stats.packed_samples == len(kept)
    too_long = sum(n > pack_size for n in lengths)
    assert stats.dropped.get("empty", 0) == lengths.count(0)
    assert stats.dropped.get("too_long", 0) == (too_long if overflow == "drop" else 0)
    assert stats.truncated == (too_long if overflow == "truncate" else 0)


@settings(max_examples=40, deadline=None)
@given(
    pairs=st.lists(st.tuples(st.integers(1, 20), st.integers(1, 20)), max_size=30),
    window=st.integers(1, 10),
    overflow=st.sampled_from(["drop", "truncate"]),
)
def test_dpo_pairs_share_a_pack_chosen_first(pairs, window, overflow):
    pack_size = 24
    samples = [_pair(i, c, r) for i, (c, r) in enumerate(pairs)]
    packs, stats = pack_bfd(samples, pack_size, PAD, window=window, overflow=overflow, groups=DPO_GROUPS)
    _check_layout(packs, pack_size)
    by_sample = _unpacked(packs)
    fits = {i for i, (c, r) in enumerate(pairs) if c + r <= pack_size}
    assert set(by_sample) == fits
    for i, docs in by_sample.items():
        chosen, rejected = docs  # both documents in one pack, chosen first
        np.testing.assert_array_equal(chosen["sequence"], samples[i]["chosen"])
        np.testing.assert_array_equal(chosen["loss_mask"], samples[i]["chosen_mask"])
        np.testing.assert_array_equal(rejected["sequence"], samples[i]["rejected"])
        np.testing.assert_array_equal(rejected["loss_mask"], samples[i]["rejected_mask"])
    reason = "too_long" if overflow == "drop" else "pair_too_long"
    assert stats.dropped.get(reason, 0) == len(pairs) - len(fits)
    assert stats.truncated == 0


def test_incremental_feeding_bounds_memory_and_matches_one_shot():
    rng = np.random.default_rng(0)
    lengths = rng.integers(1, 300, size=2_000)
    packer = BfdPacker(512, PAD, window=100, keep_open=4)
    parts = [packer.add([])]  # before any sample: no keys known yet
    for start in range(0, lengths.size, 37):
        parts.append(packer.add(_sample(i, int(n)) for i, n in enumerate(lengths[start : start + 37], start)))
        assert packer.buffered_samples < 100 + 4 * 512
    parts.append(packer.flush())
    assert packer.buffered_samples == 0
    packs = Packs.concat(parts)
    _check_layout(packs, 512)
    assert sorted(packs.sample_ids.tolist()) == list(range(lengths.size))
    assert packer.stats.tokens == int(lengths.sum())


def test_caller_may_reuse_its_buffers():
    buffer = np.arange(4, dtype=np.int32)
    packer = BfdPacker(8, PAD)
    packer.add([{"sequence": buffer, "loss_mask": np.ones(4, dtype=bool)}])
    buffer[:] = 0  # e.g. the next batch read into the same array
    assert packer.flush().arrays["sequence"][0, :4].tolist() == [0, 1, 2, 3]


def test_overflow_raise_says_length_and_fix():
    with pytest.raises(ValueError, match=r"sample 1 has 9 = 9 tokens > pack_size 8; set overflow="):
        pack_bfd([_sample(0, 3), _sample(1, 9)], 8, PAD)
    with pytest.raises(ValueError, match=r"5\+4 = 9 tokens > pack_size 8"):
        pack_bfd([_pair(0, 5, 4)], 8, PAD, groups=DPO_GROUPS)


def test_truncate_cuts_a_single_sample_to_pack_size():
    packs, stats = pack_bfd([_sample(0, 10)], 8, PAD, overflow="truncate")
    np.testing.assert_array_equal(packs.arrays["sequence"][0], np.arange(8))
    assert stats.truncated == 1 and packs.cu_seqlens.tolist() == [0, 8]


def test_pad_value_per_key_and_bool_masks():
    samples = [{"sequence": np.array([5, 6]), "labels": np.array([7, 8]), "loss_mask": np.array([True, True])}]
    packs, _ = pack_bfd(samples, 4, {"sequence": 0, "labels": -100})
    assert packs.arrays["sequence"][0].tolist() == [5, 6, 0, 0]
    assert packs.arrays["labels"][0].tolist() == [7, 8, -100, -100]
    assert packs.arrays["loss_mask"][0].tolist() == [True, True, False, False]
    with pytest.raises(ConfigError, match="no pad value for key 'labels'"):
        pack_bfd(samples, 4, {"sequence": 0})


def test_bad_samples_and_configs_are_explained():
    with pytest.raises(ValueError, match="aligned 1-D arrays"):
        pack_bfd([{"sequence": np.arange(3), "loss_mask": np.ones(2, bool)}], 8, PAD)
    with pytest.raises(ValueError, match="available keys"):
        pack_bfd([{"chosen": np.arange(3)}], 8, PAD, groups=DPO_GROUPS)
    with pytest.raises(ValueError, match="earlier samples"):
        pack_bfd([_sample(0, 2), {"sequence": np.arange(2)}], 8, PAD)
    with pytest.raises(ConfigError, match="overflow='split' is unknown"):
        BfdPacker(8, PAD, overflow="split")
    with pytest.raises(ConfigError, match="pack_size"):
        BfdPacker(0, PAD)
    with pytest.raises(ConfigError, match="pad_value"):
        BfdPacker(8, None)


def test_empty_stream_gives_no_packs():
    packs, stats = pack_bfd([], 8, PAD)
    assert len(packs) == 0 and stats.utilisation == 0.0 and stats.lower_bound_packs == 0


def _alpaca_lengths() -> np.ndarray:
    if not ALPACA.exists():
        if os.environ.get("CI") == "true":
            pytest.fail(f"fixture {ALPACA} is missing in CI")
        pytest.skip(f"fixture {ALPACA} not available")
    rows = json.loads(ALPACA.read_text())
    return np.array([len(r["instruction"] + r["input"] + r["output"]) // 4 for r in rows])


def _packs_for(lengths: np.ndarray, pack_size: int, **options) -> tuple[int, PackStats]:
    packs, stats = pack_bfd((_sample(i, int(n)) for i, n in enumerate(lengths)), pack_size, PAD, **options)
    assert stats.lower_bound_packs == math.ceil(lengths[lengths > 0].sum() / pack_size)
    return len(packs), stats


def test_utilisation_on_alpaca_lengths_is_near_the_lower_bound():
    n_packs, stats = _packs_for(_alpaca_lengths(), 2048)
    assert n_packs <= 1.03 * stats.lower_bound_packs
    assert stats.utilisation > 0.95


@pytest.mark.parametrize("window", [200, 1000])
def test_utilisation_on_a_long_stream_with_small_windows(window):
    # Token lengths of chat data are roughly log-normal (median ~200, long tail up to pack_size).
    rng = np.random.default_rng(1)
    lengths = np.clip(rng.lognormal(5.3, 0.9, size=10_000).astype(int), 1, 2048)
    n_packs, stats = _packs_for(lengths, 2048, window=window)
    assert n_packs <= 1.03 * stats.lower_bound_packs
