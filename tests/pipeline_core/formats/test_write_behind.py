"""H5Writer writes its chunked datasets in a thread of its own (WriteBehind): the file holds every
append in order, a failed write is raised and leaves the file closed and not complete, at most
``depth`` writes wait, and no writer thread outlives its file."""

from __future__ import annotations

import threading

import h5py
import numpy as np
import pytest

from pipeline_core.formats import h5_writer
from pipeline_core.formats.h5 import COMPLETE_ATTR
from pipeline_core.formats.h5_writer import SMALL_BYTES, H5Writer
from pipeline_core.formats.ragged import Ragged
from pipeline_core.formats.write_behind import WriteBehind

BATCH = 1 << 18  # int32 values: 1 MiB a batch, so the dataset turns chunked after ~8 batches


def batches(n: int, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.integers(0, 50_000, BATCH + i, dtype=np.int32) for i in range(n)]


def writer_threads() -> list[str]:
    return [t.name for t in threading.enumerate() if t.name.startswith("h5pipe-h5-write")]


def test_every_append_lands_in_order(tmp_path):
    parts = batches(24)
    assert sum(p.nbytes for p in parts) > 2 * SMALL_BYTES  # most of it written behind
    writer = H5Writer(str(tmp_path / "a.h5"), narrow={"ids": np.uint16})
    for part in parts:
        writer.append_ragged("ids", Ragged(part, np.array([0, part.size], dtype=np.int64)))
    writer.close()
    assert writer_threads() == []
    with h5py.File(tmp_path / "a.h5", "r") as f:
        assert f.attrs[COMPLETE_ATTR]
        assert f["ids"].dtype == np.uint16
        np.testing.assert_array_equal(f["ids"][...], np.concatenate(parts))
        np.testing.assert_array_equal(f["ids_offsets"][...], np.cumsum([0] + [p.size for p in parts]))


def test_a_failed_write_is_raised_and_the_file_is_not_complete(tmp_path, monkeypatch):
    real, calls = h5_writer._extend, []

    def failing(dataset, values):  # the disk fills up on the third write behind
        calls.append(values.size)
        if len(calls) == 3:
            raise OSError(28, "No space left on device")
        real(dataset, values)

    monkeypatch.setattr(h5_writer, "_extend", failing)
    writer = H5Writer(str(tmp_path / "b.h5"))
    with pytest.raises(OSError, match="No space left"):
        for part in batches(40):
            writer.append_ragged("ids", Ragged(part, np.array([0, part.size], dtype=np.int64)))
        writer.close()
    writer.close(complete=False)  # as ChunkWriter.discard does: the error was raised already
    assert not writer.file.id.valid and writer_threads() == []
    with h5py.File(tmp_path / "b.h5", "r") as f:
        assert COMPLETE_ATTR not in f.attrs


def test_at_most_depth_writes_wait():
    behind, release, ran = WriteBehind(depth=2), threading.Event(), []
    behind.submit(release.wait)  # runs, holding the writer thread
    behind.submit(ran.append, 1)  # waits
    third = threading.Thread(target=behind.submit, args=(ran.append, 2))
    third.start()
    third.join(0.3)
    assert third.is_alive() and ran == []  # a third would go past the depth: it waits for a slot
    release.set()
    third.join(10)
    behind.wait()
    behind.shutdown()
    assert not third.is_alive() and ran == [1, 2]


def write_packed_like(path) -> None:
    """Two datasets that turn chunked at different appends, plus a small one, as a packed chunk has."""
    writer = H5Writer(str(path), narrow={"ids": np.uint16, "position_ids": np.uint16})
    rng = np.random.default_rng(7)
    for i in range(60):
        rows = rng.integers(0, 50_000, (64, 2048), dtype=np.int32)
        writer.append_fixed("ids", rows)
        if i % 3 == 0:  # grows a third as fast: turns chunked later, while ids are being written
            writer.append_fixed("position_ids", np.tile(np.arange(2048, dtype=np.int32), (64, 1)))
        writer.append_ragged("cu_seqlens", Ragged(np.array([0, 2048], np.int32), np.array([0, 2], np.int64)))
    writer.set_attrs({"samples": 60})
    writer.close()


def test_the_file_bytes_do_not_depend_on_the_threads_timing(tmp_path):
    """Every change to the file goes through the writer thread or comes after a wait: the same
    appends give the same bytes, run after run (the pipeline's outputs are byte-reproducible)."""
    for i in range(4):
        write_packed_like(tmp_path / f"{i}.h5")
    first = (tmp_path / "0.h5").read_bytes()
    assert all((tmp_path / f"{i}.h5").read_bytes() == first for i in range(1, 4))
    with h5py.File(tmp_path / "0.h5", "r") as f:
        assert f["ids"].shape == (60 * 64, 2048) and f["position_ids"].shape == (20 * 64, 2048)
        assert f["ids"].chunks is not None and f["position_ids"].chunks is not None  # both written behind
