"""The cache flow hands H5PIPE_ENCODE_AHEAD to every chunk (one batch at a time by default); none of
it keys or changes a file."""

from __future__ import annotations

import pytest

from flows.cache_flow import cache_flow
from pipeline_core.stages import cache as cache_stage
from pipeline_core.stages.encode_ahead import WIDTH_ENV, EncodeAhead
from tests.flows.test_cache_flow import params
from tests.flows.test_dask import assert_same_h5


@pytest.fixture()
def widths(monkeypatch):
    """The width every EncodeAhead of the cache stage is built with, in this process."""
    seen = []

    class Recording(EncodeAhead):
        def __init__(self, process, batches, width=1, inline=False):
            seen.append(width)
            super().__init__(process, batches, width, inline)

    monkeypatch.setattr(cache_stage, "EncodeAhead", Recording)
    return seen


def same_files(a, b):
    names = sorted(p.name for p in a.glob("*.h5"))
    assert names and names == sorted(p.name for p in b.glob("*.h5"))
    for name in names:
        assert_same_h5(a / name, b / name)


def test_chunks_encode_one_batch_at_a_time_unless_told(gpt2_path, c4_chunks, tmp_path, widths, monkeypatch):
    monkeypatch.delenv(WIDTH_ENV, raising=False)
    shared = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "shared", pack_size=256, pad_value=0))
    assert widths == [1, 1, 1]
    widths.clear()
    monkeypatch.setenv(WIDTH_ENV, "2")  # the user's setting wins; the run reuses nothing it keyed
    told = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "told", pack_size=256, pad_value=0))
    assert widths == [2, 2, 2]
    same_files(tmp_path / "shared", tmp_path / "told")
    assert shared["summary"]["tokens_written"] == told["summary"]["tokens_written"] > 0
