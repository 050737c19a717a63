"""A downloaded remote file is reused only while it is the same file: sha256 or ETag, never size (defect 6)."""

from __future__ import annotations

import json
from pathlib import Path

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


def in_memory_folder(name: str, local: str, manifest_of: str | None = None) -> None:
    """``memory://{name}/out`` holding ``local`` as chunk_0.h5, with a manifest naming ``manifest_of``'s
    bytes (default: ``local``'s)."""
    import fsspec

    from pipeline_core.commit.manifest import Manifest, ManifestEntry, save_manifest
    from pipeline_core.storage.hashing import file_digest

    fsspec.filesystem("memory").put_file(local, f"/{name}/out/chunk_0.h5")
    digest = file_digest(manifest_of or local)
    manifest = Manifest("cache", "cfg")
    manifest.entries["chunk_0.h5"] = ManifestEntry("chunk_0.h5", digest.sha256, digest.size)
    save_manifest(f"memory://{name}/out", manifest.to_json())


def two_versions(tmp_path, gpt2) -> tuple[str, str]:
    (tmp_path / "v1").mkdir()
    first = one_h5(tmp_path / "v1", gpt2)
    second = tmp_path / "v2.h5"
    second.write_bytes(Path(first).read_bytes())
    same_size_edit(str(second))
    return first, str(second)


def test_bytes_that_are_not_the_manifests_are_refused_not_cached_under_its_name(tmp_path, gpt2):
    """A folder being synced: its new manifest has arrived, its file not yet. The old bytes were
    cached under the new manifest's sha256 and reused for good once the sync finished."""
    import fsspec
    import pytest

    from pipeline_core.loader.downloads import FileChangedError

    old, new = two_versions(tmp_path, gpt2)
    cache = str(tmp_path / "downloads")
    try:
        in_memory_folder("h5pipe-test-sync", old, manifest_of=new)
        with pytest.raises(FileChangedError, match="is not the file its folder names.*being rewritten or synced"):
            H5Dataset("memory://h5pipe-test-sync/out", cache_dir=cache)
        in_memory_folder("h5pipe-test-sync", new)  # the sync ends
        expected = int(h5py.File(new)["sequence"][0])
        assert int(H5Dataset("memory://h5pipe-test-sync/out", cache_dir=cache)[0]["sequence"][0]) == expected
    finally:
        fsspec.filesystem("memory").rm("/h5pipe-test-sync", recursive=True)


def test_a_dataset_never_reads_a_newer_copy_under_its_old_index(tmp_path, gpt2):
    """A second reader of the same folder after a rerun replaced the cached copy in place: the first
    dataset's reads (opened lazily, as DataLoader workers do) returned the new file's samples."""
    import fsspec
    import pytest

    old, new = two_versions(tmp_path, gpt2)
    cache = str(tmp_path / "downloads")
    try:
        in_memory_folder("h5pipe-test-live", old)
        first = H5Dataset("memory://h5pipe-test-live/out", cache_dir=cache)
        in_memory_folder("h5pipe-test-live", new)
        second = H5Dataset("memory://h5pipe-test-live/out", cache_dir=cache)
        assert int(second[0]["sequence"][0]) == int(h5py.File(new)["sequence"][0])
        with pytest.raises(FileNotFoundError):
            first[0]  # its copy is gone: loud, never the newer file's sample 0
    finally:
        fsspec.filesystem("memory").rm("/h5pipe-test-live", recursive=True)


def test_a_commit_during_the_read_never_mixes_two_runs(tmp_path, gpt2, monkeypatch):
    """The file names came from one read of the manifest and their sha256 from a second: a run that
    committed in between had its new bytes taken under the old run's set of files, with no error."""
    import fsspec
    import pytest

    from pipeline_core.commit import manifest as manifests
    from pipeline_core.loader import downloads
    from pipeline_core.loader.downloads import FileChangedError

    old, new = two_versions(tmp_path, gpt2)
    real, reads = manifests.load_manifest, []

    def commit_after_first_read(folder, storage_options=None):
        found = real(folder, storage_options)
        reads.append(folder)
        if len(reads) == 1:
            in_memory_folder("h5pipe-test-race", new)  # another run commits right after this read
        return found

    monkeypatch.setattr(manifests, "load_manifest", commit_after_first_read)
    monkeypatch.setattr(downloads, "load_manifest", commit_after_first_read, raising=False)
    try:
        in_memory_folder("h5pipe-test-race", old)
        with pytest.raises(FileChangedError, match="is not the file its folder names"):
            downloads.local_files("memory://h5pipe-test-race/out", cache_dir=str(tmp_path / "downloads"))
        assert len(reads) == 1
    finally:
        fsspec.filesystem("memory").rm("/h5pipe-test-race", recursive=True)
