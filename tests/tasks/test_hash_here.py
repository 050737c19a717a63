"""hash_here and hash_in_order: the chunks' digests taken in the flow's process, in order, retried on
transient I/O."""

from __future__ import annotations

import hashlib
import threading

import pytest

from tasks.hashing import hash_here, hash_in_order
from tasks.retry import TransientIOError
from tests.faults import FlakyFileSystem


@pytest.fixture()
def chunks(tmp_path):
    paths = []
    for i in range(3):
        path = tmp_path / f"train_chunk_{i}.jsonl"
        path.write_bytes(b'{"text": "%d"}\n' % i * (i + 1))
        paths.append(path)
    yield paths
    FlakyFileSystem.reset()


def test_digests_are_the_files_sha256_and_size_in_order(chunks):
    found = hash_here([f"flaky://{p}" for p in chunks], threads=2)
    assert [(d.sha256, d.size) for d in found] == [
        (hashlib.sha256(p.read_bytes()).hexdigest(), p.stat().st_size) for p in chunks
    ]
    assert [d.url for d in found] == [f"flaky://{p}" for p in chunks]


def test_a_transient_read_failure_is_retried_as_the_hash_task_would_be(chunks):
    FlakyFileSystem.fail_reads("train_chunk_1.jsonl", 2, TransientIOError)
    found = hash_here([f"flaky://{p}" for p in chunks], delays=(0.0, 0.0))
    assert found[1].sha256 == hashlib.sha256(chunks[1].read_bytes()).hexdigest()
    assert FlakyFileSystem.read_attempts[str(chunks[1])] == 3


def test_retries_run_out_and_other_errors_are_not_retried(chunks):
    FlakyFileSystem.fail_reads("train_chunk_1.jsonl", 5, TransientIOError)
    with pytest.raises(TransientIOError, match="reading"):
        hash_here([f"flaky://{p}" for p in chunks], delays=(0.0, 0.0))
    FlakyFileSystem.reset()
    FlakyFileSystem.fail_reads("train_chunk_2.jsonl", 1, PermissionError)
    with pytest.raises(PermissionError):
        hash_here([f"flaky://{p}" for p in chunks], delays=(0.0, 0.0))
    assert FlakyFileSystem.read_attempts[str(chunks[2])] == 1


def test_digests_come_one_by_one_before_the_later_files_are_read(chunks):
    gate = threading.Event()
    FlakyFileSystem.hold_reads("train_chunk_2.jsonl", gate)  # the last file waits for the first digest
    found = hash_in_order([f"flaky://{p}" for p in chunks], threads=1, delays=())
    first = next(found)  # a whole-list implementation waits here for the held file, and fails
    assert first.sha256 == hashlib.sha256(chunks[0].read_bytes()).hexdigest()
    gate.set()
    assert [d.url for d in found] == [f"flaky://{p}" for p in chunks[1:]]
