"""cache_one reads a stamped input once and checks its stamp after; an input rewritten between its
hash and the end of its read is refused, stamped or not."""

from __future__ import annotations

import hashlib
import os

import fsspec
import h5py
import pytest
from prefect import flow

from flows.cache_flow import make_job
from flows.params import CacheParams
from pipeline_core.commit.stamps import stamp_now, stamps
from pipeline_core.formats.jsonl import JsonlReader
from tasks.cache import cache_one
from tasks.models import ChunkDigest

ROWS = b"".join(b'{"text": "row %d of the chunk"}\n' % i for i in range(40))


@pytest.fixture()
def chunk(tmp_path):
    path = tmp_path / "in" / "train_chunk_0.jsonl"
    path.parent.mkdir()
    path.write_bytes(ROWS)
    return path


def job_for(chunk, gpt2_path):
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    return make_job(CacheParams(input=str(chunk.parent), output=str(chunk.parent.parent / "out"), tokenizer=tokenizer))


def digest_of(chunk, stamp: str | None) -> ChunkDigest:
    data = chunk.read_bytes()
    return ChunkDigest(url=str(chunk), sha256=hashlib.sha256(data).hexdigest(), size=len(data), stamp=stamp)


@flow
def run_one(job, found: ChunkDigest, rewrite_to: bytes | None = None):
    if rewrite_to is not None:  # the input changes after the flow hashed it, before the task reads it
        with open(found.url, "wb") as f:
            f.write(rewrite_to)
    return cache_one(job, found)


def source_attr(result) -> str:
    with h5py.File(result.output_url, "r") as f:
        return f.attrs["source_sha256"]


@pytest.mark.parametrize("stamped", [True, False])
def test_an_unchanged_input_records_its_sha256_stamped_or_not(chunk, gpt2_path, stamped):
    found = digest_of(chunk, stamp_now(str(chunk)) if stamped else None)
    result = run_one(job_for(chunk, gpt2_path), found)
    assert source_attr(result) == hashlib.sha256(ROWS).hexdigest()
    assert result.rows_read == 40


@pytest.mark.parametrize("stamped", [True, False])
def test_an_input_rewritten_after_its_hash_is_refused(chunk, gpt2_path, stamped):
    found = digest_of(chunk, stamp_now(str(chunk)) if stamped else None)
    how = "stamp" if stamped else "sha256"
    with pytest.raises(RuntimeError, match=f"train_chunk_0.jsonl changed while it was being cached \\({how}"):
        run_one(job_for(chunk, gpt2_path), found, rewrite_to=ROWS.replace(b"row 7 ", b"row 8 "))


def test_a_stamped_read_does_not_hash_and_says_so(chunk):
    reader = JsonlReader(str(chunk), hashes=False)
    assert sum(len(b) for b in reader) == 40
    with pytest.raises(RuntimeError, match="hashes=False"):
        _ = reader.sha256


def test_stamp_now_is_the_listing_stamp_locally_and_on_s3(chunk, s3_bucket):
    bucket, options = s3_bucket
    url = f"{bucket}/in/train_chunk_0.jsonl"
    fsspec.filesystem("s3", **options).pipe(url, ROWS)
    for where, storage in ((str(chunk), None), (url, options)):
        assert stamp_now(where, storage) is not None
        assert stamp_now(where, storage) == stamps([where], storage)[where]
    assert stamp_now(str(chunk) + ".gone") is None
    before = stamp_now(str(chunk))
    os.utime(chunk, ns=(chunk.stat().st_atime_ns, chunk.stat().st_mtime_ns + 1_000_000))
    assert stamp_now(str(chunk)) != before


def test_a_result_carries_the_stamps_of_the_files_it_wrote(chunk, gpt2_path):
    """So a Prefect hit of it is known to name these very files (pipeline_core/commit/standing.py)."""
    job = job_for(chunk, gpt2_path).model_copy(update={"output_format": "both"})
    files = run_one(job, digest_of(chunk, None)).files()
    assert len(files) == 3  # the HDF5 file, the Megatron .bin and .idx
    assert all(f.stamp for f in files)
    assert {f.url: f.stamp for f in files} == stamps([f.url for f in files])
