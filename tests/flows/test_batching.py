"""Small chunks share a task (flows/batching.py): same files as one task per chunk, reruns
reuse them chunk by chunk, a changed chunk is recomputed alone."""

from __future__ import annotations

import hashlib
import json

import pytest

from flows import batching
from flows.batching import BATCH_BYTES, BATCH_CHUNKS, SMALL_CHUNK_BYTES, batches, stamp_size
from flows.cache_flow import cache_flow
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import params, write_chunks


def test_few_large_or_unknown_chunks_keep_a_task_each():
    assert batches([10] * 4, workers=2) is None  # not more than two per worker
    assert batches([10] * 9 + [SMALL_CHUNK_BYTES], workers=2) is None
    assert batches([10] * 9 + [None], workers=2) is None


def test_batches_keep_order_two_per_worker_and_their_bounds():
    groups = batches([10] * 1000, workers=2)
    assert [k for g in groups for k in g] == list(range(1000))
    assert len(groups) >= 4 and max(len(g) for g in groups) == BATCH_CHUNKS
    assert len(batches([10] * 9, workers=2)) == 5  # 9 // 4 = 2 per batch: at least 4 batches
    big = SMALL_CHUNK_BYTES - 1
    assert all(sum(big for _ in g) <= BATCH_BYTES for g in batches([big] * 100, workers=2))


def test_stamp_size_reads_the_size_of_a_stamp():
    assert stamp_size("size=123:mtime=1.5:ino=7") == 123 and stamp_size(None) is None


@pytest.fixture()
def twelve_chunks(tmp_path, llamafactory):
    return write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 12)


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.h5"))}


def test_batched_chunks_write_the_files_one_task_per_chunk_writes(gpt2_path, twelve_chunks, tmp_path, monkeypatch):
    p = params(gpt2_path, twelve_chunks, tmp_path / "batched", pack_size=256, pad_value=0)
    assert batches([1] * 12, p.run.max_workers) is not None  # this job is batched
    first = cache_flow(p)
    monkeypatch.setattr(batching, "SMALL_CHUNK_BYTES", 0)  # every chunk its own task
    monkeypatch.setattr(batching, "TASK_BYTES", 0)
    single = cache_flow(params(gpt2_path, twelve_chunks, tmp_path / "single", pack_size=256, pad_value=0))
    assert len(digests(tmp_path / "batched")) == 12
    assert digests(tmp_path / "batched") == digests(tmp_path / "single")
    assert first["summary"]["samples_written"] == single["summary"]["samples_written"] == 300
    manifest = json.loads((tmp_path / "batched" / "h5pipe-manifest.json").read_text())
    assert len(manifest["entries"]) == 12


def test_a_rerun_reuses_batched_chunks_and_recomputes_only_a_changed_one(gpt2_path, twelve_chunks, tmp_path):
    p = params(gpt2_path, twelve_chunks, tmp_path / "out")
    assert cache_flow(p)["cached"] == [False] * 12
    assert cache_flow(p)["cached"] == [True] * 12
    with open(twelve_chunks / "train_chunk_5.jsonl", "a") as f:
        f.write(json.dumps({"text": "one more document"}) + "\n")
    again = cache_flow(p)
    assert again["cached"] == [i != 5 for i in range(12)]
