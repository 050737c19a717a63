"""A downloaded remote file is reused only while it is the same file: sha256 or ETag, never size (defect 6)."""

from __future__ import annotations

import json

import h5py
import s3fs

from pipeline_core import cache_jsonl
from pipeline_core.loader.dataset import H5Dataset
from pipeline_core.processors.pt import PretrainProcessor


def one_h5(tmp_path, gpt2) -> str:
    src = tmp_path / "c.jsonl"
    src.write_text("".join(json.dumps({"text": f"document number {i} here"}) + "\n" for i in range(20)))
    (out,) = cache_jsonl(str(src), str(tmp_path / "h5"), PretrainProcessor(gpt2))
    return out


def same_size_edit(path: str) -> None:
    with h5py.File(path, "r+") as f:
        f["sequence"][0] = f["sequence"][0] + 1  # same size, other bytes


def test_an_edited_remote_file_of_the_same_size_is_downloaded_again(s3_bucket, tmp_path, gpt2):
    bucket, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    local = one_h5(tmp_path, gpt2)
    fs.put_file(local, f"{bucket[5:]}/data/c.h5")
    cache = str(tmp_path / "downloads")
    first = int(H5Dataset(f"{bucket}/data", cache_dir=cache, storage_options=options)[0]["sequence"][0])
    size = fs.size(f"{bucket[5:]}/data/c.h5")
    same_size_edit(local)
    fs.put_file(local, f"{bucket[5:]}/data/c.h5")
    fs.invalidate_cache()
    assert fs.size(f"{bucket[5:]}/data/c.h5") == size
    again = int(H5Dataset(f"{bucket}/data", cache_dir=cache, storage_options=options)[0]["sequence"][0])
    assert again == first + 1


def test_a_file_on_a_store_without_stamps_is_fetched_every_time(tmp_path, gpt2):
    """fsspec's memory store, like many HTTP servers, lists no ETag or mtime: nothing names the
    content, so the copy is never reused (it was, for ever, under the constant stamp:None)."""
    import fsspec

    fs = fsspec.filesystem("memory")
    local = one_h5(tmp_path, gpt2)
    fs.put_file(local, "/h5pipe-test-nostamp/data/c.h5")
    assert "ETag" not in fs.info("/h5pipe-test-nostamp/data/c.h5") and "mtime" not in fs.info(
        "/h5pipe-test-nostamp/data/c.h5"
    )
    cache = str(tmp_path / "downloads")
    try:
        first = int(H5Dataset("memory://h5pipe-test-nostamp/data", cache_dir=cache)[0]["sequence"][0])
        same_size_edit(local)
        fs.rm("/h5pipe-test-nostamp/data/c.h5")
        fs.put_file(local, "/h5pipe-test-nostamp/data/c.h5")
        assert int(H5Dataset("memory://h5pipe-test-nostamp/data", cache_dir=cache)[0]["sequence"][0]) == first + 1
    finally:
        fs.rm("/h5pipe-test-nostamp", recursive=True)
