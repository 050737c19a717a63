"""File stamps change whenever a file is rewritten, locally and on S3, and come from one listing."""

from __future__ import annotations

import os
import time

import fsspec

from pipeline_core.commit.stamps import file_infos, stamp_of, stamps


def write(path, data: bytes) -> None:
    with open(path, "wb") as f:
        f.write(data)


def test_local_stamp_follows_size_mtime_and_replacement(tmp_path):
    a, b = tmp_path / "a.jsonl", tmp_path / "b.jsonl"
    write(a, b"one\n")
    write(b, b"one\n")
    first = stamps([str(a), str(b)])
    assert first[str(a)] and first[str(a)] != first[str(b)]  # same bytes, other file
    assert stamps([str(a)]) == {str(a): first[str(a)]}  # nothing changed: same stamp

    os.utime(a, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns + 1_000_000))
    touched = stamps([str(a)])[str(a)]
    assert touched != first[str(a)]

    replacement = tmp_path / "a.tmp"
    write(replacement, b"two\n")
    os.utime(replacement, ns=(a.stat().st_atime_ns, a.stat().st_mtime_ns))
    os.replace(replacement, a)  # same size, same mtime, new inode
    assert stamps([str(a)])[str(a)] != touched


def test_missing_file_and_folder_have_no_stamp(tmp_path):
    assert stamps([str(tmp_path / "nope.jsonl"), str(tmp_path / "no-dir" / "x.jsonl")]) == {
        str(tmp_path / "nope.jsonl"): None,
        str(tmp_path / "no-dir" / "x.jsonl"): None,
    }


def test_store_without_change_marker_gives_no_stamp():
    assert stamp_of({"name": "x", "type": "file", "size": 3}) is None
    assert stamp_of({"name": "x", "type": "directory", "size": 0, "mtime": 1.0}) is None
    assert stamp_of({"name": "x", "type": "file", "size": 3, "ETag": '"abc"'}) == 'size=3:ETag="abc"'


def test_s3_stamp_is_the_etag_and_changes_with_content(s3_bucket):
    bucket, options = s3_bucket
    fs = fsspec.filesystem("s3", **options)
    url = f"{bucket}/in/train_chunk_0.jsonl"
    fs.pipe(url, b'{"text": "a"}\n')
    first = stamps([url], options)[url]
    assert first.startswith("size=14:ETag=")
    fs.pipe(url, b'{"text": "b"}\n')  # same size, other bytes
    fs.invalidate_cache()
    assert stamps([url], options)[url] != first


def test_one_listing_per_folder(tmp_path, monkeypatch):
    for i in range(5):
        write(tmp_path / f"c{i}.jsonl", b"x\n")
    fs = fsspec.filesystem("file")
    calls = []
    real_ls = type(fs).ls
    monkeypatch.setattr(
        type(fs),
        "ls",
        lambda self, path, detail=True, **kw: calls.append(path) or real_ls(self, path, detail=detail, **kw),
    )
    infos = file_infos([str(tmp_path / f"c{i}.jsonl") for i in range(5)])
    assert len(calls) == 1 and all(info["size"] == 2 for info in infos.values())


def test_local_stamp_changes_when_bytes_change_and_the_mtime_is_set_back(tmp_path):
    """``st_ctime`` cannot be set back by a user: an in-place edit with a restored mtime still shows (defect 7)."""
    a = tmp_path / "a.h5"
    write(a, b"0123456789")
    before = stamps([str(a)])[str(a)]
    st = a.stat()
    time.sleep(0.05)  # past the file system's coarse clock tick, as any later edit is
    with open(a, "r+b") as f:
        f.write(b"X")
    os.utime(a, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert a.stat().st_mtime_ns == st.st_mtime_ns and a.stat().st_ino == st.st_ino
    assert stamps([str(a)])[str(a)] != before
