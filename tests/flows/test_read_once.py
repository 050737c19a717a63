"""A whole cache flow run reads each stamped chunk once (its reader does not hash it again), reads
with hashing when stamps are not trusted, and refuses a chunk rewritten while the run caches it."""

from __future__ import annotations

import hashlib

import pytest

from flows.cache_flow import cache_flow
from flows.params import RunOptions
from pipeline_core.formats.jsonl import JsonlReader
from pipeline_core.stages import input_stream
from tasks import cache as cache_task
from tests.flows.test_cache_flow import params
from tests.flows.test_dask import assert_same_h5


@pytest.fixture()
def readers(monkeypatch):
    """(input file name, hashes) of every JsonlReader the cache stage builds in this process."""
    seen = []

    class Recording(JsonlReader):
        def __init__(self, url, *args, **kwargs):
            super().__init__(url, *args, **kwargs)
            seen.append((url.rsplit("/", 1)[-1], self._hasher is not None))

    monkeypatch.setattr(input_stream, "JsonlReader", Recording)
    return seen


def sha256_attrs(folder):
    import h5py

    found = {}
    for path in sorted(folder.glob("*.h5")):
        with h5py.File(path, "r") as f:
            found[path.stem] = f.attrs["source_sha256"]
    return found


def test_a_flow_run_reads_each_stamped_chunk_once(gpt2_path, c4_chunks, tmp_path, readers):
    names = sorted(p.name for p in c4_chunks.glob("*.jsonl"))
    once = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "once"))
    assert once["cached"] == [False, False, False]
    assert sorted(readers) == [(name, False) for name in names]  # the flow's hash stands for the read's
    readers.clear()
    hashed = cache_flow(params(gpt2_path, c4_chunks, tmp_path / "hashed", run=RunOptions(trust_stamps=False)))
    assert hashed["cached"] == [False, False, False]
    assert sorted(readers) == [(name, True) for name in names]
    expected = {p.stem: hashlib.sha256(p.read_bytes()).hexdigest() for p in c4_chunks.glob("*.jsonl")}
    assert sha256_attrs(tmp_path / "once") == sha256_attrs(tmp_path / "hashed") == expected
    for path in sorted((tmp_path / "once").glob("*.h5")):
        assert_same_h5(path, tmp_path / "hashed" / path.name)


@pytest.mark.parametrize("trust_stamps", [True, False])
def test_a_chunk_rewritten_during_the_run_is_refused(gpt2_path, c4_chunks, tmp_path, monkeypatch, trust_stamps):
    victim = sorted(c4_chunks.glob("*.jsonl"))[1]
    real = cache_task.cache_files

    def rewritten(inputs):  # after the flow hashed every chunk, as the stage is about to read this one
        for one in inputs:
            if one.url.endswith(victim.name):
                data = victim.read_bytes()
                victim.write_bytes(data.replace(b"e", b"a", 1))  # same size: only the bytes tell
            yield one

    monkeypatch.setattr(cache_task, "cache_files", lambda inputs, *a, **k: real(rewritten(inputs), *a, **k))
    run = RunOptions(trust_stamps=trust_stamps)
    how = "stamp" if trust_stamps else "sha256"
    with pytest.raises(Exception, match=f"{victim.name} changed while it was being cached \\({how}"):
        cache_flow(params(gpt2_path, c4_chunks, tmp_path / "out", run=run))
    left = sorted(p.name for p in (tmp_path / "out").iterdir() if victim.stem in p.name)
    assert left == []  # no HDF5, errors file or staging file of the refused chunk
