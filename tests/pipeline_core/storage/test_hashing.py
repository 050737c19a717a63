"""file_digest and matches: a file against a recorded size and sha256, or its size alone."""

from __future__ import annotations

import hashlib
import os

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.storage import hashing
from pipeline_core.storage.hashing import FileDigest, file_digest, matches

SMALL_BLOCK = 64  # blocks of this size make every edge (one byte short, exact, one over) cheap


def test_digest_is_the_sha256_and_size_of_the_bytes(tmp_path):
    (tmp_path / "f").write_bytes(b"hello world")
    assert file_digest(str(tmp_path / "f")) == FileDigest(hashlib.sha256(b"hello world").hexdigest(), 11)


def test_size_mode_trusts_the_size_and_sha256_mode_reads_the_bytes(tmp_path):
    path = tmp_path / "f"
    path.write_bytes(b"hello world")
    recorded = FileDigest(hashlib.sha256(b"hello world").hexdigest(), 11)
    assert matches(str(path), recorded) and matches(str(path), recorded, how="size")
    path.write_bytes(b"HELLO world")  # same size, other bytes
    assert not matches(str(path), recorded)
    assert matches(str(path), recorded, how="size")
    path.write_bytes(b"hello")
    assert not matches(str(path), recorded, how="size")
    path.unlink()
    assert not matches(str(path), recorded, how="size") and not matches(str(path), recorded)


SIZES = st.one_of(
    st.integers(0, 4 * SMALL_BLOCK + 1),
    st.sampled_from([SMALL_BLOCK * k + d for k in (1, 2, 3) for d in (-1, 0, 1)]),
)


@settings(max_examples=60, deadline=None)
@given(data=SIZES.flatmap(lambda n: st.binary(min_size=n, max_size=n)))
def test_digest_over_many_blocks_is_hashlibs_of_the_whole_file(tmp_path_factory, data):
    # the buffer is reused between blocks: a short last block must not hash the previous block's tail
    path = tmp_path_factory.mktemp("blocks") / "f"
    path.write_bytes(data)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(hashing, "BLOCK", SMALL_BLOCK)
        assert file_digest(str(path)) == FileDigest(hashlib.sha256(data).hexdigest(), len(data))


def test_digest_of_an_object_on_s3_over_many_blocks(s3_bucket, monkeypatch):
    import s3fs

    url, options = s3_bucket
    data = os.urandom(5 * SMALL_BLOCK + 7)
    s3fs.S3FileSystem(**options).pipe(f"{url}/f.bin", data)
    monkeypatch.setattr(hashing, "BLOCK", SMALL_BLOCK)
    assert file_digest(f"{url}/f.bin", options) == FileDigest(hashlib.sha256(data).hexdigest(), len(data))
