"""bench/core_seconds.py's parts on a tiny corpus (not timed): each counts what it says it did."""

from __future__ import annotations

import orjson
import pytest
from tokenizers import Tokenizer

import bench.core_seconds
from bench.core_seconds import part_gigatoken, part_parse, part_stage, report
from bench.corpus import GPT2, CorpusSpec, build


@pytest.fixture(scope="module")
def corpus(tmp_path_factory, fixtures):
    return build(tmp_path_factory.mktemp("core-seconds"), CorpusSpec(size_mb=0.2, chunk_mb=0.1), shapes=("pt",))


def test_parse_reads_every_row(corpus):
    rows = sum(len(p.read_bytes().splitlines()) for p in corpus.files("pt"))
    assert part_parse(corpus.files("pt"))["texts"] == rows == corpus.documents


def test_rebuilds_are_counted_and_change_no_token(corpus, monkeypatch):
    monkeypatch.setattr(bench.core_seconds, "BATCH", 10)
    texts = [line for p in corpus.files("pt") for line in p.read_bytes().splitlines()]
    expected = sum(
        len(e.ids) for e in Tokenizer.from_file(str(GPT2)).encode_batch([orjson.loads(t)["text"] for t in texts])
    )
    once, rebuilt = part_gigatoken(corpus.files("pt")), part_gigatoken(corpus.files("pt"), rebuild_every=1)
    assert once["tokens"] == rebuilt["tokens"] == expected
    assert once["rebuilds"] == 0
    # a new tokenizer before every batch of 10 texts but the first
    assert rebuilt["rebuilds"] == -(-len(texts) // 10) - 1 > 0


def test_stage_part_and_report(corpus, tmp_path):
    stage = part_stage(corpus.folder("pt"), 0, tmp_path)
    assert stage["wall"] > 0 and stage["cpu"] > 0
    assert list(tmp_path.iterdir()) == []  # its output folder is removed
    threads = stage["threads"]
    # the stage's own threads are named and counted once each, within the process's CPU time
    assert {"main", "h5pipe-read-ahead", "h5pipe-encode", "native pool (gigatoken)"} <= set(threads)
    assert threads["h5pipe-read-ahead"] > 0 and threads["main"] > 0
    assert sum(threads.values()) <= stage["cpu"] + 0.01 * len(threads)  # /proc counts in ticks of 10 ms
    parts = {"parse": stage, "gigatoken": stage, "gigatoken, rebuilt": stage, "stage pack=0": stage}
    table, by_thread, budget = report({"cores": 2, "parts": parts}).split("\n\n")
    rows = table.splitlines()
    assert len(rows) == 2 + len(parts)
    assert rows[-1].startswith("| stage pack=0 |") and rows[-1].endswith("| 100% | 100% |")
    assert sorted(line.split(" | ")[0] for line in by_thread.splitlines()[2:-1]) == sorted(f"| {n}" for n in threads)
    assert f"2 cores x {stage['wall'] / 0.7:.2f} s = {2 * stage['wall'] / 0.7:.2f} s of CPU at most" in budget
    assert f"it spent {stage['cpu']:.2f} s of CPU" in budget
