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


def test_same_size_other_bytes_fail_by_sha256_pass_by_size(tmp_path):
    out = published(tmp_path / "a.h5", b"output")
    (tmp_path / "a.h5").write_bytes(b"OUTPUT")
    assert not still_stands([out], "sha256")
    assert still_stands([out], "size")
    assert not still_stands([out], "stamp")  # no stamp recorded: never trusted without reading


def test_an_unchanged_stamp_needs_no_read(tmp_path, monkeypatch):
    out = published(tmp_path / "a.h5", b"output", stamp=True)
    monkeypatch.setattr(standing, "file_digest", lambda *a, **k: (_ for _ in ()).throw(AssertionError("read")))
    assert still_stands([out], "sha256") and still_stands([out], "stamp")
