"""H5Writer's layout: small files are their data plus a header, large datasets grow in chunks,
compression is recorded, narrowed ids come back in their written dtype and never wrap."""

from __future__ import annotations

import os

import h5py
import numpy as np
import pytest
import torch

from pipeline_core.formats import h5_writer as h5mod
from pipeline_core.formats.h5 import load_h5
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged

HEADER = 16_384  # attributes and object headers of a few datasets


def write(path, batches, **options):
    writer = H5Writer(str(path), **options)
    for ids, rows in batches:
        writer.append_ragged("input_ids", Ragged.from_lists(ids, dtype=np.int32))
        writer.append_fixed("position_ids", rows)
    writer.set_attrs({"vocab_size": 50257})
    writer.close()
    return path


def small_batches(n_batches=3, seed=0):
    rng = np.random.default_rng(seed)
    out = []
    for _ in range(n_batches):
        ids = [rng.integers(0, 50257, rng.integers(1, 300)).astype(np.int32) for _ in range(40)]
        out.append((ids, rng.integers(0, 2048, (8, 2048)).astype(np.int32)))
    return out


def data_bytes(path) -> int:
    with h5py.File(path) as f:
        return sum(f[k].nbytes for k in f)


def test_a_small_file_is_its_data_plus_a_header(tmp_path):
    path = write(tmp_path / "s.h5", small_batches())
    assert os.path.getsize(path) <= data_bytes(path) + HEADER
    with h5py.File(path) as f:
        assert f["input_ids"].chunks is None and f["position_ids"].chunks is None  # contiguous


def test_a_large_dataset_grows_in_chunks_and_holds_the_same_values(tmp_path, monkeypatch):
    whole = write(tmp_path / "whole.h5", small_batches(12))
    monkeypatch.setattr(h5mod, "SMALL_BYTES", 64 << 10)  # so a test-sized file counts as large
    grown = write(tmp_path / "grown.h5", small_batches(12))
    with h5py.File(grown) as f:
        assert f["position_ids"].chunks is not None and f["input_ids"].chunks is not None
    assert_same(load_h5(str(grown)), load_h5(str(whole)))


def assert_same(a: dict, b: dict) -> None:
    assert sorted(a) == sorted(b)
    for key in a:
        left = a[key] if isinstance(a[key], list) else [a[key]]
        right = b[key] if isinstance(b[key], list) else [b[key]]
        assert len(left) == len(right)
        for x, y in zip(left, right):
            assert x.dtype == y.dtype and x.numpy().tolist() == y.numpy().tolist()


@pytest.mark.parametrize("compression", ["gzip", "lzf"])
def test_compression_is_applied_recorded_and_reads_the_same_values(tmp_path, compression):
    batches = small_batches()
    plain = write(tmp_path / "p.h5", batches)
    packed = write(tmp_path / "c.h5", batches, compression=compression)
    with h5py.File(packed) as f:
        assert f.attrs["compression"] == compression
        assert f["input_ids"].compression == compression and f["position_ids"].compression == compression
    with h5py.File(plain) as f:
        assert "compression" not in f.attrs
    assert_same(load_h5(str(plain)), load_h5(str(packed)))


def test_an_unknown_compression_is_refused_naming_the_choices(tmp_path):
    with pytest.raises(ValueError, match="gzip, lzf or None"):
        H5Writer(str(tmp_path / "x.h5"), compression="zstd")


def test_narrowed_ids_are_stored_as_uint16_and_read_back_as_int32(tmp_path):
    batches = small_batches()
    wide = write(tmp_path / "w.h5", batches)
    narrow = write(tmp_path / "n.h5", batches, narrow={"input_ids": np.uint16, "position_ids": np.uint16})
    with h5py.File(narrow) as f:
        assert f["input_ids"].dtype == np.uint16 and f["position_ids"].dtype == np.uint16
        assert f["input_ids_offsets"].dtype == np.int64
    assert os.path.getsize(narrow) < 0.6 * os.path.getsize(wide)
    assert_same(load_h5(str(wide)), load_h5(str(narrow)))  # same values, same int32 dtype


def test_values_that_arrive_already_narrow_are_still_read_back_as_int32(tmp_path):
    """Packers give position ids as uint16 (formats.positions.position_dtype): the file must say
    they are read as int32, exactly as when they arrive as int32 and are narrowed here."""
    batches = small_batches()
    as_int32 = write(tmp_path / "a.h5", batches, narrow={"position_ids": np.uint16})
    already = [(ids, rows.astype(np.uint16)) for ids, rows in batches]
    as_uint16 = write(tmp_path / "b.h5", already, narrow={"position_ids": np.uint16})
    for path in (as_int32, as_uint16):
        with h5py.File(path) as f:
            assert f["position_ids"].dtype == np.uint16
    assert_same(load_h5(str(as_int32)), load_h5(str(as_uint16)))
    assert load_h5(str(as_uint16))["position_ids"].dtype == torch.int32
    with h5py.File(as_int32) as a, h5py.File(as_uint16) as b:
        assert a.attrs["narrowed"] == b.attrs["narrowed"]


def test_an_id_that_does_not_fit_the_narrow_dtype_is_refused_not_wrapped(tmp_path):
    writer = H5Writer(str(tmp_path / "x.h5"), narrow={"input_ids": np.uint16})
    with pytest.raises(ValueError, match="65536 does not fit the stored uint16"):
        writer.append_ragged("input_ids", Ragged.from_lists([np.array([1, 65536], np.int32)], dtype=np.int32))
    writer.close(complete=False)


@pytest.mark.parametrize("bad", [-1, -65536, np.iinfo(np.int32).min, 65535 + 1, np.iinfo(np.int32).max])
def test_a_negative_or_too_large_id_is_refused_by_the_one_pass_check(tmp_path, bad):
    writer = H5Writer(str(tmp_path / "x.h5"), narrow={"input_ids": np.uint16})
    ids = np.array([0, 65535, bad, 7], np.int32)
    with pytest.raises(ValueError, match=f"value {bad} does not fit the stored uint16"):
        writer.append_ragged("input_ids", Ragged.from_lists([ids], dtype=np.int32))
    writer.close(complete=False)
