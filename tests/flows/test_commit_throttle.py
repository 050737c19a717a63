"""The manifest is rewritten at most about once a second while chunks finish, and always by
``flush`` and ``commit``: 1,000 small chunks no longer cost 1,000 rewrites of a growing file."""

from __future__ import annotations

import json

from flows import commit
from flows.commit import Committer
from tasks.models import ChunkResult


def result(i: int) -> ChunkResult:
    return ChunkResult(
        input_url=f"/in/c_{i}.jsonl",
        output_url=f"/out/c_{i}.h5",
        source_sha256=f"{i:064x}",
        sha256=f"{i + 1:064x}",
        size=100 + i,
        rows_read=i,
        samples_written=i,
        rows_skipped=0,
    )


def entries(folder) -> list[str]:
    return sorted(json.loads((folder / "h5pipe-manifest.json").read_text())["entries"])


def test_records_are_saved_soon_not_each_and_all_by_flush(tmp_path, monkeypatch):
    monkeypatch.setattr(commit, "SAVE_EVERY", 3600.0)  # no second rewrite within the test
    committer = Committer.open(str(tmp_path), "cache", "cfg", False, {})
    for i in range(50):
        committer.record(result(i))
    assert entries(tmp_path) == ["c_0.h5"]  # the first finished chunk is written at once
    committer.flush()
    assert entries(tmp_path) == sorted(f"c_{i}.h5" for i in range(50))
    committer.commit([result(i) for i in range(10)])
    assert entries(tmp_path) == sorted(f"c_{i}.h5" for i in range(10))


def test_a_rewrite_is_due_again_once_save_every_has_passed(tmp_path, monkeypatch):
    monkeypatch.setattr(commit, "SAVE_EVERY", 0.0)  # every record is due (and costs ~0 s)
    committer = Committer.open(str(tmp_path), "cache", "cfg", False, {})
    committer.save_seconds = 0.0
    committer.record(result(0))
    committer.saved_at -= 1.0  # as if the last rewrite were a second ago
    committer.record(result(1))
    assert entries(tmp_path) == ["c_0.h5", "c_1.h5"]
