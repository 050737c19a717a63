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


def test_a_part_a_chunk_no_longer_writes_is_removed_by_the_commit(tmp_path):
    """A chunk recorded again with fewer parts: the part it no longer lists is removed at the final
    commit (before, its entry went and its file stayed, for a folder scan to find); a part it lists
    again is kept."""
    from flows.commit import Committer
    from tasks.models import ChunkResult, PartFile

    out = tmp_path / "out"
    out.mkdir()
    for name in ("c.h5", "c_text_document.bin", "c_title_document.bin"):
        (out / name).write_bytes(b"x")

    def result(*parts: str) -> ChunkResult:
        files = [PartFile(url=str(out / p), sha256="p", size=1) for p in parts]
        counts = {"rows_read": 0, "samples_written": 0, "rows_skipped": 0}
        return ChunkResult(
            input_url="c.jsonl",
            output_url=str(out / "c.h5"),
            source_sha256="s",
            sha256="h",
            size=1,
            parts=files,
            **counts,
        )

    first = Committer.open(str(out), "cache", "cfg", False, {})
    first.record(result("c_text_document.bin", "c_title_document.bin"))
    first.commit([result("c_text_document.bin", "c_title_document.bin")])
    again = Committer.open(str(out), "cache", "cfg", False, {})
    again.record(result("c_text_document.bin"))
    assert again.manifest.dropping == sorted(str(out / p) for p in ("c_text_document.bin", "c_title_document.bin"))
    removed = again.commit([result("c_text_document.bin")])
    assert removed == [str(out / "c_title_document.bin")]
    assert sorted(p.name for p in out.iterdir() if p.suffix != ".json") == ["c.h5", "c_text_document.bin"]
    assert sorted(manifest(out)["entries"]) == ["c.h5", "c_text_document.bin"]


def test_relative_paths_are_made_absolute_so_a_rerun_elsewhere_reuses_and_removes_only_its_own(
    gpt2_path, c4_chunks, tmp_path, monkeypatch
):
    """The manifest kept relative URLs as given: a rerun from another folder recomputed every chunk
    and removed a dropped chunk's quarantine file relative to its own folder, outside the output."""
    (tmp_path / "a").mkdir()
    (tmp_path / "b" / "out").mkdir(parents=True)
    decoy = tmp_path / "b" / "out" / "train_chunk_2.errors.jsonl"
    decoy.write_text("not h5pipe's\n")
    with open(c4_chunks / "train_chunk_2.jsonl", "a", encoding="utf-8") as f:
        f.write('{"body": "no text"}\n')  # a quarantined row: the chunk has an errors file
    monkeypatch.chdir(tmp_path / "a")
    first = cache_flow(params(gpt2_path, "../in", "out"))
    assert (tmp_path / "a" / "out" / "train_chunk_2.errors.jsonl").exists()
    assert all(c["output_url"].startswith(str(tmp_path / "a" / "out")) for c in first["chunks"])
    (c4_chunks / "train_chunk_2.jsonl").unlink()
    monkeypatch.chdir(tmp_path / "b")
    second = cache_flow(params(gpt2_path, "../in", "../a/out"))
    assert second["summary"]["cached_chunks"] == 2  # the same outputs, reached by another relative path
    assert decoy.read_text() == "not h5pipe's\n"
    assert not list((tmp_path / "a" / "out").glob("train_chunk_2*"))  # its own files went


def test_a_trial_run_with_a_limit_leaves_the_other_chunks_outputs_alone(gpt2_path, c4_chunks, tmp_path):
    """--limit 1 into a folder holding all three chunks' outputs removed the other two (their
    inputs, still there, were taken for gone)."""
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out))
    before = {p.name: p.read_bytes() for p in out.glob("*.h5")}
    trial = cache_flow(params(gpt2_path, c4_chunks, out, limit=1))
    assert trial["summary"]["chunks"] == 1
    assert {p.name: p.read_bytes() for p in out.glob("*.h5")} == before and len(before) == 3
    assert sorted(manifest(out)["entries"]) == sorted(before) and not verify_output(str(out)).problems
