"""The cache flow tells each chunk how to share the cores: concurrent chunks encode one batch at a
time, a lone chunk two, H5PIPE_ENCODE_AHEAD overrides both; none of it keys or changes a file."""

from __future__ import annotations

import pytest

from flows.cache_flow import cache_flow
from flows.params import RunOptions
from flows.runners import tasks_at_once
from pipeline_core.stages import cache as cache_stage
from pipeline_core.stages.encode_ahead import WIDTH_ENV, EncodeAhead
from tests.flows.test_cache_flow import params
from tests.flows.test_dask import assert_same_h5


@pytest.mark.parametrize(
    ("run", "chunks", "expected"),
    [
        (RunOptions(), 3, 2),
        (RunOptions(), 1, 1),
        (RunOptions(), 0, 1),
        (RunOptions(max_workers=4), 3, 3),
        (RunOptions(task_runner="processes", max_workers=2), 5, 2),
        (RunOptions(task_runner="dask", max_workers=2, dask_workers="processes"), 5, 2),
        (RunOptions(task_runner="dask", dask_address="tcp://elsewhere:8786"), 5, 1),
    ],
)
def test_tasks_at_once(run, chunks, expected):
    assert tasks_at_once(run, chunks) == expected


@pytest.fixture()
def widths(monkeypatch):
    """The width every EncodeAhead of the cache stage is built with, in this process."""
    seen = []

    class Recording(EncodeAhead):
        def __init__(self, process, batches, width=2):
            seen.append(width)
            super().__init__(process, batches, width)

    monkeypatch.setattr(cache_stage, "EncodeAhead", Recording)
    return seen


def same_files(a, b):
    names = sorted(p.name for p in a.glob("*.h5"))
    assert names and names == sorted(p.name for p in b.glob("*.h5"))
    for name in names:
        assert_same_h5(a / name, b / name)


def test_concurrent_chunks_encode_one_batch_at_a_time(gpt2_path, c4_chunks, tmp_path, widths, monkeypatch):
    monkeypatch.delenv(WIDTH_ENV, raising=False)
    shared = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "shared", pack_size=256, pad_value=0))
    assert widths == [1, 1, 1]
    widths.clear()
    monkeypatch.setenv(WIDTH_ENV, "2")  # the user's setting wins; the run reuses nothing it keyed
    told = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "told", pack_size=256, pad_value=0))
    assert widths == [2, 2, 2]
    same_files(tmp_path / "shared", tmp_path / "told")
    assert shared["summary"]["tokens_written"] == told["summary"]["tokens_written"] > 0


def test_a_lone_chunk_encodes_two_batches_at_once(gpt2_path, c4_chunks, tmp_path, widths, monkeypatch):
    monkeypatch.delenv(WIDTH_ENV, raising=False)
    cache_flow(params(gpt2_path, c4_chunks, tmp_path / "out", limit=1))
    assert widths == [2]
