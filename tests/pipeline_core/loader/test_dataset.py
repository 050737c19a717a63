"""H5Dataset over real cache outputs: random access across files, DataLoader workers, shared memory."""

from __future__ import annotations

import json
import os
from collections import Counter
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.utils.data import DataLoader

from pipeline_core import H5Dataset, ProcessorFactory, cache_jsonl, load_h5
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged
from tests.conftest import load_json_or_jsonl


def _as_list(batch):
    return batch  # keep variable-length items apart


@pytest.fixture(scope="module")
def sft_outputs(trained, llamafactory, tmp_path_factory):
    """Four chunks of alpaca through the real cache stage, unpacked and packed."""
    root = tmp_path_factory.mktemp("ds")
    rows = [
        {"query": r["instruction"], "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")[:200]
    ]
    inputs = []
    bounds = np.cumsum([0, 70, 50, 1, 79])  # uneven sizes, one tiny chunk
    for i, (start, stop) in enumerate(zip(bounds[:-1], bounds[1:])):
        path = root / f"train_chunk_{i}.jsonl"
        path.write_text("".join(json.dumps(r) + "\n" for r in rows[start:stop]))
        inputs.append(path)
    (root / "train_chunk_4.jsonl").write_text('{"query": "no response"}\n')  # every row skipped: an empty file
    inputs.append(root / "train_chunk_4.jsonl")
    processor = ProcessorFactory.create("sft", trained)
    unpacked = cache_jsonl(inputs, root / "unpacked", processor)
    packed = cache_jsonl(inputs, root / "packed", processor, pack_size=256, pad_value=0, packing="bfd")
    expected = processor.process_batch(rows).samples
    return root, unpacked, packed, expected


def test_random_access_across_files(sft_outputs):
    root, _, _, expected = sft_outputs
    dataset = H5Dataset(root / "unpacked")
    assert len(dataset) == 200 and dataset.keys == ["loss_mask", "sequence"]
    for i in [0, 69, 70, 119, 120, 121, 199, -1]:
        item = dataset[i]
        assert item["sequence"].dtype == torch.int64 and item["loss_mask"].dtype == torch.bool  # ids widened on read
        np.testing.assert_array_equal(item["sequence"].numpy(), expected["sequence"][i % 200])
        np.testing.assert_array_equal(item["loss_mask"].numpy(), expected["loss_mask"][i % 200])
    with pytest.raises(IndexError, match="out of range"):
        dataset[200]
    assert [a["samples_written"] for a in dataset.attrs] == [70, 50, 1, 79, 0]


@pytest.mark.parametrize("share_memory", [False, True])
def test_dataloader_workers_yield_every_sample_exactly_once(sft_outputs, share_memory):
    root, _, _, expected = sft_outputs
    dataset = H5Dataset(root / "unpacked", share_memory=share_memory)
    dataset[5]  # the parent opens a handle first: workers must not reuse it
    loader = DataLoader(dataset, batch_size=16, num_workers=2, collate_fn=_as_list)
    items = [item for batch in loader for item in batch]
    assert [it["sequence"].tolist() for it in items] == expected["sequence"].to_lists()
    assert [it["loss_mask"].tolist() for it in items] == [
        m.tolist() for m in [expected["loss_mask"][i] for i in range(200)]
    ]
    shuffled = DataLoader(dataset, batch_size=7, num_workers=2, shuffle=True, collate_fn=_as_list)
    seen = Counter(tuple(it["sequence"].tolist()) for batch in shuffled for it in batch)
    assert seen == Counter(tuple(s) for s in expected["sequence"].to_lists())


def test_share_memory_loads_once_into_shared_tensors(sft_outputs):
    root, _, _, _ = sft_outputs
    dataset = H5Dataset(root / "unpacked", share_memory=True)
    assert dataset._handles == {}
    assert dataset[3]["sequence"].is_shared()


def test_packed_items_are_rows_with_their_boundaries(sft_outputs):
    root, _, packed, _ = sft_outputs
    dataset = H5Dataset(root / "packed", keys=["sequence", "position_ids", "cu_seqlens"])
    stored = [load_h5(url) for url in packed]
    assert len(dataset) == sum(len(s.get("sequence", ())) for s in stored)  # the last file is empty
    batch = next(iter(DataLoader(dataset, batch_size=4, num_workers=2, collate_fn=_as_list)))
    first = stored[0]
    for p, item in enumerate(batch):
        assert item["sequence"].shape == (256,) and torch.equal(item["sequence"], first["sequence"][p])
        assert torch.equal(item["position_ids"], first["position_ids"][p])
        assert torch.equal(item["cu_seqlens"], first["cu_seqlens"][p])


def test_partial_files_are_refused_with_the_fix(tmp_path):
    writer = H5Writer(str(tmp_path / "chunk_0.h5"))
    writer.append_ragged("sequence", Ragged.from_lists([[1, 2], [3]]))
    writer.close(complete=False)
    with pytest.raises(ValueError, match="partial.*re-run the cache stage"):
        H5Dataset(tmp_path)
    with pytest.raises(ValueError, match="partial.*re-run the cache stage"):
        load_h5(str(tmp_path / "chunk_0.h5"))  # it read the partial file as if complete
    (tmp_path / "empty").mkdir()
    with pytest.raises(FileNotFoundError, match="no .h5 files"):
        H5Dataset(tmp_path / "empty")


def test_missing_keys_are_named(sft_outputs):
    root, _, _, _ = sft_outputs
    with pytest.raises(KeyError, match="available keys"):
        H5Dataset(root / "unpacked", keys=["input_ids"])


def test_remote_folder_is_downloaded_once(sft_outputs, tmp_path, monkeypatch):
    import fsspec

    from pipeline_core.commit.manifest import Manifest, ManifestEntry, save_manifest
    from pipeline_core.storage.hashing import file_digest

    root, unpacked, _, expected = sft_outputs
    fs = fsspec.filesystem("memory")
    manifest = Manifest("cache", "cfg")  # its sha256s name the files: the memory store gives no stamp
    for url in unpacked:
        name = os.path.basename(url)
        fs.pipe(f"/remote-ds/{name}", Path(url).read_bytes())
        digest = file_digest(url)
        manifest.entries[name] = ManifestEntry(name, digest.sha256, digest.size)
    save_manifest("memory://remote-ds", manifest.to_json())
    first = H5Dataset("memory://remote-ds", cache_dir=str(tmp_path / "cache"))
    assert len(first) == 200 and first[150]["sequence"].tolist() == expected["sequence"][150].tolist()
    assert all(p.startswith(str(tmp_path / "cache")) for p in first.paths)
    calls = []
    monkeypatch.setattr(type(fs), "get_file", lambda *a, **k: calls.append(a))
    again = H5Dataset("memory://remote-ds", cache_dir=str(tmp_path / "cache"))
    assert calls == [] and again.paths == first.paths


def test_downloads_go_where_the_other_records_go(tmp_path, monkeypatch):
    from pipeline_core.loader.downloads import _cache_root

    monkeypatch.delenv("H5PIPE_CACHE", raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    monkeypatch.delenv("H5PIPE_CACHE_DIR", raising=False)
    assert _cache_root(None) == str(tmp_path / "xdg" / "h5pipe")
    monkeypatch.setenv("H5PIPE_CACHE_DIR", str(tmp_path / "shared"))
    assert _cache_root(None) == str(tmp_path / "shared")
    monkeypatch.setenv("H5PIPE_CACHE_DIR", "none")  # records off; downloads still need a folder
    assert _cache_root(None) == str(tmp_path / "xdg" / "h5pipe")
    monkeypatch.setenv("H5PIPE_CACHE", str(tmp_path / "downloads"))  # the downloads-only override wins
    assert _cache_root(None) == str(tmp_path / "downloads")
    assert _cache_root(str(tmp_path / "given")) == str(tmp_path / "given")
