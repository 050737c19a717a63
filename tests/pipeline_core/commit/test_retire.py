"""Retiring a folder: readers refuse it from the first write on, and a removal cut short is finished
by the next call; the manifest goes last."""

from __future__ import annotations

import hashlib

import pytest

import pipeline_core.commit.retire as retire_module
from pipeline_core.commit.manifest import (
    IncompleteFolder,
    Manifest,
    ManifestEntry,
    committed_outputs,
    load_manifest,
    save_manifest,
)
from pipeline_core.commit.retire import retire


def committed_folder(folder) -> None:
    """Two outputs, one with a quarantine file recorded in its result, and a run record."""
    folder.mkdir()
    entries = {}
    for name in ("a.h5", "b.h5"):
        data = name.encode()
        (folder / name).write_bytes(data)
        extra = {"result": {"errors_url": str(folder / "a.errors.jsonl")}} if name == "a.h5" else {}
        entries[name] = ManifestEntry(name, hashlib.sha256(data).hexdigest(), len(data), extra=extra)
    (folder / "a.errors.jsonl").write_text("{}\n")
    (folder / "h5pipe-run.json").write_text("{}")
    save_manifest(str(folder), Manifest("cache", "c0ffee", entries=entries).to_json())


def test_retire_removes_every_listed_file_then_the_manifest(tmp_path):
    folder = tmp_path / "validation"
    committed_folder(folder)
    (folder / "notes.txt").write_text("the user's own file")
    removed = retire(str(folder), with_files=[str(folder / "h5pipe-run.json")])
    assert sorted(removed) == sorted(str(folder / n) for n in ("a.h5", "b.h5", "a.errors.jsonl", "h5pipe-run.json"))
    assert sorted(p.name for p in folder.iterdir()) == ["notes.txt"]  # not listed: left alone
    assert retire(str(folder)) == []  # nothing left to do


def test_a_retirement_cut_short_is_refused_by_readers_and_finished_by_the_next(tmp_path, monkeypatch):
    folder = tmp_path / "validation"
    committed_folder(folder)
    removals = []

    def killed_after_one(url, storage_options=None):
        if removals:
            raise KeyboardInterrupt("killed")
        removals.append(url)
        (tmp_path / url).unlink()

    monkeypatch.setattr(retire_module, "remove_quietly", killed_after_one)
    with pytest.raises(KeyboardInterrupt):
        retire(str(folder), with_files=[str(folder / "h5pipe-run.json")])
    monkeypatch.undo()
    left = load_manifest(str(folder))
    assert left.entries == {} and not left.complete and len(left.dropping) == 4  # the run record too
    with pytest.raises(IncompleteFolder):
        committed_outputs(str(folder), ".h5")
    retire(str(folder))  # a later run finds the folder so and finishes, the run record included
    assert list(folder.iterdir()) == []


def test_a_copied_folder_never_removes_the_original_folders_files(tmp_path):
    """The manifest records its quarantine files (and an interrupted run's ``dropping``) by URL, in
    the folder it was written in: retiring a copy removes the copy's files, never the original's."""
    import shutil

    original = tmp_path / "validation"
    committed_folder(original)
    copy = tmp_path / "copy" / "validation"
    shutil.copytree(original, copy)
    manifest = load_manifest(str(copy))
    manifest.dropping = [str(original / "b.h5")]  # a removal cut short in the original folder
    save_manifest(str(copy), manifest.to_json())
    removed = retire(str(copy))
    assert all(url.startswith(str(copy)) for url in removed) and str(copy / "a.errors.jsonl") in removed
    assert sorted(p.name for p in original.iterdir()) == [
        "a.errors.jsonl",
        "a.h5",
        "b.h5",
        "h5pipe-manifest.json",
        "h5pipe-run.json",
    ]
