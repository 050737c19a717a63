"""SIGKILL of the cache and export stages mid-chunk, locally, then a rerun.

The worker is a real process killed with SIGKILL while its chunk's staging temp is being filled.
Afterwards every chunk under its final name is complete (byte-identical to an uninterrupted run) or
absent; the dead writer's temp is swept; the rerun is byte-identical to the uninterrupted run, so
every row is there exactly once.
"""

from __future__ import annotations

import filecmp
import signal

import orjson
import pytest

from pipeline_core.commit.sweep import sweep_stale_temps
from pipeline_core.commit.verify import h5_problems
from pipeline_core.processors import ProcessorFactory
from pipeline_core.stages.cache import cache_jsonl
from pipeline_core.stages.export import export_dataset
from tests.reliability.helpers import assert_exactly_once, hidden, kill, published, start_worker, temp_of, wait_for

MIB = 1 << 20


@pytest.fixture(scope="module")
def big_inputs(tmp_path_factory, llamafactory):
    """Two chunks of c4 rows repeated to ~25 MB each (large enough to be killed mid-write)."""
    data = (llamafactory / "c4_demo.jsonl").read_bytes()
    folder = tmp_path_factory.mktemp("big")
    for i in range(2):
        (folder / f"train_chunk_{i}.jsonl").write_bytes(data * 34)
    return folder


def absent_or_same(path, reference) -> bool:
    return not path.exists() or filecmp.cmp(path, reference, shallow=False)


def test_sigkill_mid_cache_chunk_leaves_absent_or_complete_and_rerun_is_identical(
    big_inputs, tmp_path, gpt2, gpt2_path, c4_texts
):
    processor = ProcessorFactory.create("pt", gpt2)
    reference = tmp_path / "reference"
    cache_jsonl(str(big_inputs), str(reference), processor, batch_size=256)
    out = tmp_path / "out"

    worker = start_worker("cache", big_inputs, out, gpt2_path, 256)
    temp = wait_for(temp_of(out, "train_chunk_1.h5", min_size=MIB), worker)
    kill(worker)

    assert worker.returncode == -signal.SIGKILL
    assert temp.exists(), "the killed writer left its temp behind"
    assert filecmp.cmp(out / "train_chunk_0.h5", reference / "train_chunk_0.h5", shallow=False)
    assert absent_or_same(out / "train_chunk_1.h5", reference / "train_chunk_1.h5")
    assert all(not h5_problems(str(p)) for p in published(out))

    assert str(temp) in sweep_stale_temps(str(out))
    assert hidden(out) == []
    cache_jsonl(str(big_inputs), str(out), processor, batch_size=256)
    for name in ("train_chunk_0.h5", "train_chunk_1.h5"):
        assert filecmp.cmp(out / name, reference / name, shallow=False)
    assert_exactly_once(out / "train_chunk_1.h5", gpt2, c4_texts * 34)
    assert hidden(out) == []


def test_sigkill_mid_export_chunk_leaves_absent_or_complete_and_rerun_is_identical(tmp_path, c4_rows):
    rows = c4_rows * 67  # ~50 MB of JSONL in three chunks
    rows_path = tmp_path / "rows.jsonl"
    rows_path.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in rows))
    chunk_size = len(rows) // 3
    reference = tmp_path / "reference"
    export_dataset(rows, str(reference), "train", chunk_size)
    out = tmp_path / "out"

    worker = start_worker("export", rows_path, out, chunk_size)
    temp = wait_for(temp_of(out, "train_chunk_1.jsonl", min_size=MIB), worker)
    kill(worker)

    assert worker.returncode == -signal.SIGKILL
    assert temp.exists()
    assert filecmp.cmp(out / "train_chunk_0.jsonl", reference / "train_chunk_0.jsonl", shallow=False)
    for name in ("train_chunk_1.jsonl", "train_chunk_2.jsonl"):
        assert absent_or_same(out / name, reference / name)

    assert str(temp) in sweep_stale_temps(str(out))
    export_dataset(rows, str(out), "train", chunk_size)
    assert sorted(p.name for p in out.iterdir()) == sorted(p.name for p in reference.iterdir())
    for path in reference.iterdir():
        assert filecmp.cmp(out / path.name, path, shallow=False)
    lines = [
        orjson.loads(line) for i in range(3) for line in (out / f"train_chunk_{i}.jsonl").read_bytes().splitlines()
    ]
    assert lines == rows  # every row exactly once, in order
