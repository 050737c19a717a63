"""cache_many: several chunks in one stream, each output hashed in a thread behind it; the results
come in order, and those finished before a later chunk fails are still handed over."""

from __future__ import annotations

import hashlib
from pathlib import Path

import h5py
import pytest
from prefect import flow

from flows.cache_flow import make_job
from flows.params import CacheParams
from tasks.cache import cache_many
from tasks.models import ChunkDigest


def rows(k: int, n: int) -> bytes:
    return b"".join(b'{"text": "chunk %d says row %d"}\n' % (k, i) for i in range(n))


@pytest.fixture()
def chunks(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    paths = []
    for k, n in enumerate((30, 5, 12, 7)):
        path = folder / f"train_chunk_{k}.jsonl"
        path.write_bytes(rows(k, n))
        paths.append(path)
    return paths


def job_for(folder, gpt2_path):
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    return make_job(CacheParams(input=str(folder), output=str(folder.parent / "out"), tokenizer=tokenizer))


def digest_of(path, sha256: str | None = None) -> ChunkDigest:
    data = path.read_bytes()
    return ChunkDigest(url=str(path), sha256=sha256 or hashlib.sha256(data).hexdigest(), size=len(data))


@flow
def run_many(job, chunks: list[ChunkDigest]) -> tuple[list, str | None]:
    """Every result cache_many hands over, and the error it then raised (if any)."""
    taken = []
    try:
        for result in cache_many(job, chunks):
            taken.append(result)
    except RuntimeError as error:
        return taken, str(error)
    return taken, None


def test_results_come_in_order_with_each_output_file_s_own_sha256(chunks, gpt2_path):
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), [digest_of(p) for p in chunks])
    assert error is None
    assert [r.input_url for r in taken] == [str(p) for p in chunks]
    assert [r.rows_read for r in taken] == [30, 5, 12, 7]  # counted from the lines written above
    for result, path in zip(taken, chunks):
        written = Path(result.output_url).read_bytes()
        assert (result.sha256, result.size) == (hashlib.sha256(written).hexdigest(), len(written))
        assert result.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        with h5py.File(result.output_url, "r") as f:
            assert f.attrs["source_sha256"] == result.source_sha256


def test_chunks_finished_before_a_failing_one_are_still_results(chunks, gpt2_path):
    found = [digest_of(p) for p in chunks]
    found[2] = digest_of(chunks[2], sha256="0" * 64)  # its read will not match: refused after chunks 0 and 1
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), found)
    assert error is not None and "train_chunk_2.jsonl changed while it was being cached" in error
    assert [r.input_url for r in taken] == [str(chunks[0]), str(chunks[1])]
    for result in taken:
        written = Path(result.output_url).read_bytes()
        assert result.sha256 == hashlib.sha256(written).hexdigest()
    assert not (chunks[0].parent.parent / "out" / "train_chunk_2.h5").exists()  # no partial output stands
