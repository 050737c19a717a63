"""The one reuse rule: a chunk stands only while every file it published holds its committed bytes."""

from __future__ import annotations

import hashlib

import pipeline_core.commit.standing as standing
from pipeline_core.commit.stamps import stamps
from pipeline_core.commit.standing import Published, still_stands


def published(path, data: bytes, stamp: bool = False) -> Published:
    path.write_bytes(data)
    recorded = stamps([str(path)])[str(path)] if stamp else None
    return Published(str(path), hashlib.sha256(data).hexdigest(), len(data), recorded)


def test_every_file_must_stand(tmp_path):
    out, part = published(tmp_path / "a.h5", b"output"), published(tmp_path / "a.errors.jsonl", b"{}\n")
    assert still_stands([out, part])
    (tmp_path / "a.errors.jsonl").unlink()
    assert not still_stands([out, part])


def never_read(monkeypatch) -> None:
    monkeypatch.setattr(standing, "file_digest", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))


def test_same_size_other_bytes_fail_by_sha256(tmp_path):
    out = published(tmp_path / "a.h5", b"output")
    (tmp_path / "a.h5").write_bytes(b"OUTPUT")
    assert not still_stands([out], "sha256")
    assert not still_stands([out], "stamp")  # no stamp recorded: never trusted without reading


def test_size_mode_refuses_a_same_size_rewrite_of_a_stamped_file_without_reading(tmp_path, monkeypatch):
    """Another run's file of the same size (--overwrite to other settings and back) is not this one."""
    out = published(tmp_path / "a.h5", b"output", stamp=True)
    (tmp_path / "a.h5").write_bytes(b"OUTPUT")
    never_read(monkeypatch)
    assert not still_stands([out], "size")


def test_size_mode_hashes_a_file_recorded_without_a_stamp_where_the_store_gives_one(tmp_path):
    """A record from before the tasks stamped their files: only its bytes can tell."""
    out = published(tmp_path / "a.h5", b"output")
    assert still_stands([out], "size")
    (tmp_path / "a.h5").write_bytes(b"OUTPUT")
    assert not still_stands([out], "size")


def test_size_mode_goes_by_the_size_where_the_store_gives_no_stamps(tmp_path, monkeypatch):
    out = published(tmp_path / "a.h5", b"output")
    unstamped = {out.url: {"name": out.url, "type": "file", "size": 6}}  # no ETag, no mtime
    never_read(monkeypatch)
    assert still_stands([out], "size", infos=unstamped)
    assert not still_stands([out], "size", infos={out.url: {**unstamped[out.url], "size": 7}})


def test_an_unchanged_stamp_needs_no_read(tmp_path, monkeypatch):
    out = published(tmp_path / "a.h5", b"output", stamp=True)
    never_read(monkeypatch)
    assert still_stands([out], "sha256") and still_stands([out], "stamp") and still_stands([out], "size")
