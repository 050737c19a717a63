"""A run that drops outputs and is killed after its manifest stopped listing them, before their
files were removed, leaves them named under ``dropping``; the next run removes them. Before,
they stayed behind as strays that `h5pipe verify` reported forever (seen in
tests/reliability/test_fault_matrix.py's random kills)."""

from __future__ import annotations

import json

from flows import commit
from flows.cache_flow import cache_flow
from pipeline_core.commit.verify import verify_output
from tests.flows.test_cache_flow import params


def manifest(folder) -> dict:
    return json.loads((folder / "h5pipe-manifest.json").read_text())


def test_files_of_dropped_outputs_left_by_a_killed_run_are_removed_by_the_next(
    gpt2_path, c4_chunks, tmp_path, monkeypatch
):
    out = tmp_path / "out"
    p = params(gpt2_path, c4_chunks, out)
    cache_flow(p)
    assert (out / "train_chunk_2.h5").exists()
    (c4_chunks / "train_chunk_2.jsonl").unlink()  # its output is dropped by the next run

    def killed(url, storage_options=None):
        raise RuntimeError("killed between the manifest and the removal")

    monkeypatch.setattr(commit, "remove_quietly", killed)
    assert cache_flow(p, return_state=True).is_failed()
    body = manifest(out)
    assert sorted(body["entries"]) == ["train_chunk_0.h5", "train_chunk_1.h5"]
    assert [u.rsplit("/", 1)[-1] for u in body["dropping"]] == ["train_chunk_2.h5"]
    assert (out / "train_chunk_2.h5").exists()

    monkeypatch.undo()
    cache_flow(p)
    assert not (out / "train_chunk_2.h5").exists()
    assert "dropping" not in manifest(out)
    assert not verify_output(str(out)).problems


def test_a_dropping_file_the_next_run_writes_again_is_kept(gpt2_path, c4_chunks, tmp_path, monkeypatch):
    out = tmp_path / "out"
    p = params(gpt2_path, c4_chunks, out)
    cache_flow(p)
    moved = (c4_chunks / "train_chunk_2.jsonl").read_bytes()
    (c4_chunks / "train_chunk_2.jsonl").unlink()
    monkeypatch.setattr(commit, "remove_quietly", lambda url, storage_options=None: 1 / 0)
    assert cache_flow(p, return_state=True).is_failed()
    monkeypatch.undo()
    (c4_chunks / "train_chunk_2.jsonl").write_bytes(moved)  # the input is back before the next run
    result = cache_flow(p)
    assert (out / "train_chunk_2.h5").exists() and result["summary"]["chunks"] == 3
    assert "dropping" not in manifest(out) and not verify_output(str(out)).problems
