"""Derived position ids equal the ones both packers store, for any document lengths and pack
sizes, documents cut at pack boundaries included; written both ways through the real sink, the
readers give the same keys, values and dtypes."""

from __future__ import annotations

import tempfile
from pathlib import Path

import h5py
import numpy as np
import torch
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats.h5 import load_h5
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.keys import KeyLayout
from pipeline_core.formats.positions import (
    STORAGE_ATTR,
    position_dtype,
    positions_from_cu,
    read_position_ids,
    segment_positions,
)
from pipeline_core.formats.ragged import Ragged
from pipeline_core.loader import H5Dataset
from pipeline_core.packing.bfd import BfdPacker
from pipeline_core.packing.concat import DocumentConcatPacker
from pipeline_core.packing.packs import Packs
from pipeline_core.stages.h5_sink import H5Sink, narrowed_keys

PT = KeyLayout({"sequence": ("sequence",)}, ())
batches_of_lengths = st.lists(st.lists(st.integers(1, 40), min_size=0, max_size=12), min_size=1, max_size=5)


def documents(lengths: list[int], first: int = 1) -> Ragged:
    """Documents of the given lengths whose ids count up (so a misplaced token shows)."""
    return Ragged.from_lists(
        [np.arange(first + sum(lengths[:i]), first + sum(lengths[: i + 1])) for i in range(len(lengths))]
    )


def concat_packs(batches: list[list[int]], pack_size: int) -> Packs:
    packer = DocumentConcatPacker(pack_size, pad_value=0, length_key="sequence")
    parts = [packer.add({"sequence": documents(lengths)}) for lengths in batches]
    return Packs.concat([*parts, packer.flush()])


def bfd_packs(lengths: list[int], pack_size: int, window: int) -> Packs:
    packer = BfdPacker(pack_size, 0, window=window)
    docs = documents([min(n, pack_size) for n in lengths])
    return Packs.concat([packer.add({"sequence": docs[i]} for i in range(len(docs))), packer.flush()])


@settings(max_examples=300, deadline=None)
@given(
    n=st.integers(0, 5),
    pack_size=st.one_of(st.integers(1, 40), st.sampled_from([65535, 65536, 65537])),
    data=st.data(),
)
def test_segment_positions_count_from_the_last_start_in_the_pack(n, pack_size, data):
    """Against a model written out index by index; near 65536, where uint16 must not wrap."""
    size = n * pack_size
    inner = data.draw(st.lists(st.integers(0, max(size - 1, 0)), max_size=12)) if size else []
    starts = np.union1d(np.array(inner, dtype=np.int64), np.arange(n, dtype=np.int64) * pack_size)
    dtype = position_dtype(pack_size)
    got = segment_positions(starts, n, pack_size, dtype)
    assert got.shape == (n, pack_size) and got.dtype == dtype
    for p in range(n):
        own = sorted(int(s) - p * pack_size for s in starts if p * pack_size <= s < (p + 1) * pack_size)
        edges = own[1:] + [pack_size]  # each start's column holds until the next start
        expected = np.concatenate([np.arange(b - a) for a, b in zip(own, edges)])
        assert np.array_equal(got[p], expected), p


def test_position_dtype_is_uint16_while_every_position_fits():
    assert position_dtype(1) == np.uint16 and position_dtype(65536) == np.uint16
    assert position_dtype(65537) == np.int32


@settings(max_examples=150, deadline=None)
@given(batches=batches_of_lengths, pack_size=st.integers(1, 64))
def test_concat_positions_derive_from_cu_seqlens(batches, pack_size):
    packs = concat_packs(batches, pack_size)
    derived = positions_from_cu(packs.cu_seqlens, packs.cu_offsets, pack_size)
    assert derived.dtype == np.int32 and np.array_equal(derived, packs.position_ids)


@settings(max_examples=150, deadline=None)
@given(lengths=st.lists(st.integers(1, 40), max_size=40), pack_size=st.integers(1, 64), window=st.integers(1, 9))
def test_bfd_positions_derive_from_cu_seqlens(lengths, pack_size, window):
    packs = bfd_packs(lengths, pack_size, window)
    derived = positions_from_cu(packs.cu_seqlens, packs.cu_offsets, pack_size)
    assert derived.dtype == np.int32 and np.array_equal(derived, packs.position_ids)


def test_the_layout_of_the_docstring():
    # pack_size 8, documents A of 5 and B of 6 under concat (packing/concat.py's docstring)
    cu, offsets = np.array([0, 5, 8, 0, 3]), np.array([0, 3, 5])
    expected = [[0, 1, 2, 3, 4, 0, 1, 2], [0, 1, 2, 0, 0, 0, 0, 0]]
    assert positions_from_cu(cu, offsets, 8).tolist() == expected


def write_packed(path: Path, batches: list[list[int]], pack_size: int, position_ids: str) -> str:
    writer = H5Writer(str(path), narrow=narrowed_keys(PT, 50257, pack_size, 0))
    packer = DocumentConcatPacker(pack_size, pad_value=0, length_key="sequence")
    sink = H5Sink(writer, PT, _Stage(packer), str(path) + ".deferred", position_ids)
    for lengths in batches:
        sink.write({"sequence": documents(lengths)})
    sink.finish()
    writer.set_attrs({"pack_size": pack_size, STORAGE_ATTR: position_ids})
    writer.close()
    return str(path)


class _Stage:
    """The PackStage a concat cache run uses, over the packer itself."""

    whole_samples = False

    def __init__(self, packer: DocumentConcatPacker) -> None:
        self.add, self.flush = packer.add, packer.flush


def assert_same_items(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        left, right = (a[key], b[key]) if isinstance(a[key], list) else ([a[key]], [b[key]])
        assert len(left) == len(right), key
        assert all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(left, right)), key


@settings(max_examples=25, deadline=None)
@given(batches=batches_of_lengths.filter(lambda b: sum(map(sum, b)) > 0), pack_size=st.integers(1, 48))
def test_readers_give_the_same_values_from_a_derived_file(batches, pack_size):
    with tempfile.TemporaryDirectory() as tmp:
        stored = write_packed(Path(tmp) / "stored.h5", batches, pack_size, "stored")
        derived = write_packed(Path(tmp) / "derived.h5", batches, pack_size, "derived")
        with h5py.File(derived) as f:
            assert "position_ids" not in f and "cu_seqlens" in f
        assert_same_items(load_h5(stored), load_h5(derived))
        for share in (False, True):
            a, b = H5Dataset(stored, share_memory=share), H5Dataset(derived, share_memory=share)
            assert len(a) == len(b) and a.keys == b.keys
            for i in range(len(a)):
                assert_same_items(a[i], b[i])
            assert_same_items(a.collate([a[i] for i in range(len(a))]), b.collate([b[i] for i in range(len(b))]))


def test_a_derived_file_serves_position_ids_when_asked_for_by_name(tmp_path):
    derived = write_packed(tmp_path / "d.h5", [[5, 6]], 8, "derived")
    ds = H5Dataset(derived, keys=["sequence", "position_ids"])
    assert ds[1]["position_ids"].tolist() == [0, 1, 2, 0, 0, 0, 0, 0]
    with h5py.File(derived) as f:
        assert read_position_ids(f, 0, 1).tolist() == [[0, 1, 2, 3, 4, 0, 1, 2]]
