"""The manifest is rewritten at most about once a second while chunks finish, and always by
``flush`` and ``commit``: 1,000 small chunks no longer cost 1,000 rewrites of a growing file."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from flows import commit
from flows.commit import Committer
from pipeline_core.commit.manifest import ManifestEntry
from tasks.models import ChunkResult, PartFile


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


def _with_parts(i: int, parts: list[str], version: int) -> ChunkResult:
    files = [PartFile(url=f"/out/{p}", sha256=f"{version:064x}", size=version) for p in parts]
    return result(i).model_copy(update={"parts": files, "size": 100 + version})


def _reference_record(entries: dict, r: ChunkResult) -> dict:
    """What ``record`` did before it kept an index of parts: drop every entry whose ``part_of`` is
    this output, then add its parts and itself."""
    name = r.output_url.rsplit("/", 1)[-1]
    entries = {k: v for k, v in entries.items() if v.extra.get("part_of") != name}
    for part in r.parts:
        key = part.url.rsplit("/", 1)[-1]
        entries[key] = ManifestEntry(key, part.sha256, part.size, extra={"part_of": name})
    entries[name] = ManifestEntry(name, r.sha256, r.size, r.source_sha256, r.rows_read, r.samples_written, 0,
                                  extra={"result": r.model_dump()})  # fmt: skip
    return entries


@settings(max_examples=40, deadline=None)
@given(
    st.lists(
        st.tuples(st.integers(0, 4), st.lists(st.sampled_from(["a.bin", "a.idx", "b.bin", "e.jsonl"]), unique=True)),
        max_size=12,
    )
)
def test_recording_again_drops_the_old_parts_as_a_full_scan_would(tmp_path_factory, records):
    folder = tmp_path_factory.mktemp("commit")
    committer = Committer.open(str(folder), "cache", "cfg", False, {})
    expected: dict = {}
    for version, (i, parts) in enumerate(records):
        r = _with_parts(i, parts, version)
        committer.record(r, save=False)
        expected = _reference_record(expected, r)
    assert {k: (v.sha256, v.extra.get("part_of")) for k, v in committer.manifest.entries.items()} == {
        k: (v.sha256, v.extra.get("part_of")) for k, v in expected.items()
    }


def test_parts_recorded_by_an_earlier_run_are_dropped_when_their_output_is_recorded_again(tmp_path):
    first = Committer.open(str(tmp_path), "cache", "cfg", False, {})
    first.record(_with_parts(0, ["a.bin", "a.idx"], 1))
    first.flush()
    again = Committer.open(str(tmp_path), "cache", "cfg", False, {})  # indexes the manifest it read
    again.record(_with_parts(0, ["a.bin"], 2))
    again.flush()
    assert entries(tmp_path) == ["a.bin", "c_0.h5"]
