"""bench/file_cost.py: the counted children do the work they say, and the count is read from
valgrind's own summary (valgrind itself is not run here: CI machines may not carry it)."""

from __future__ import annotations

import h5py

from bench import file_cost


def test_the_writer_child_writes_complete_files(tmp_path, monkeypatch):
    written = []

    class Kept:  # keep the folder so the file can be read after the child returns
        def __enter__(self):
            return str(tmp_path)

        def __exit__(self, *exc):
            written.extend(tmp_path.glob("*.h5"))

    monkeypatch.setattr(file_cost.tempfile, "TemporaryDirectory", Kept)
    file_cost.writer_files(2)
    with h5py.File(written[0]) as f:
        assert bool(f.attrs["complete"]) and len(f.attrs) >= 38 and list(f["s"][:3]) == [0, 1, 2]


def test_the_stage_child_caches_every_chunk(monkeypatch, fixtures):
    import pipeline_core.stages.cache as cache

    outputs, original = [], cache.cache_jsonl

    def counted(*args, **kwargs):
        outputs.extend(original(*args, **kwargs))
        return outputs

    monkeypatch.setattr(cache, "cache_jsonl", counted)
    file_cost.stage_files(3)
    assert [o.rsplit("/", 1)[-1] for o in outputs] == [f"train_chunk_{i}.h5" for i in range(3)]


def test_the_count_is_read_from_callgrinds_summary(monkeypatch):
    summary = "==1== Events    : Ir\n==1== Collected : 123456789\n==1==\n==1== I   refs:      123,456,789\n"

    class Done:
        stderr = summary

    monkeypatch.setattr(file_cost.subprocess, "run", lambda *a, **k: Done())
    assert file_cost.instructions("writer", 3) == 123456789
