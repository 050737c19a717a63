"""matches: a file against a recorded size and sha256, or its size alone."""

from __future__ import annotations

import hashlib

from pipeline_core.storage.hashing import FileDigest, file_digest, matches


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
