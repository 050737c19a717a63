"""A cache folder whose Megatron files change between runs: ``h5pipe merge`` takes exactly the
files the manifest lists, and the runs leave no file of settings or chunks they replaced.

Before, merge globbed ``{stem}_*_{level}.idx`` in the folder: a chunk emptied since an earlier run
was merged with its old documents, and the sentence files of a run overwritten by a document run
could win over the new ones, with no error. A removed input in a Megatron folder stopped the
commit with ``KeyError: 'errors_url'``; an empty input with ``output_format='megatron'`` stopped the
task with an IndexError. The expected documents are the tokenizer's own ids of the rows each
chunk holds, read back by megatron-core's reader."""

from __future__ import annotations

import dataclasses
import json
import shutil
import struct

import pytest

from flows.cache_flow import cache_flow
from pipeline_core.commit.manifest import load_manifest, save_manifest
from pipeline_core.commit.verify import verify_output
from pipeline_core.stages.merge import merge_output
from tests.flows.test_cache_flow import params
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset


def documents(prefix) -> list[list[int]]:
    """megatron-core's reader; without mmap, which refuses the empty .bin of an empty chunk (as it
    refuses the one Megatron's preprocess_data.py writes for an empty input)."""
    dataset = _megatron_indexed_dataset()(str(prefix), mmap=False)
    return [dataset[i].tolist() for i in range(len(dataset))]


def expected(gpt2, folder, chunks) -> list[list[int]]:
    rows = [json.loads(line) for i in chunks for line in (folder / f"train_chunk_{i}.jsonl").read_text().splitlines()]
    return [gpt2.encode(r["text"]) + [gpt2.eos_token_id] for r in rows]


def megatron_files(folder) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.suffix in (".bin", ".idx"))


@pytest.mark.parametrize("output_format", ["megatron", "both"])
def test_an_emptied_chunk_merges_as_empty_and_a_removed_one_not_at_all(
    gpt2, gpt2_path, c4_chunks, tmp_path, output_format
):
    out = tmp_path / "out"
    p = params(gpt2_path, c4_chunks, out, output_format=output_format)
    cache_flow(p)
    (c4_chunks / "train_chunk_1.jsonl").write_text("")
    (c4_chunks / "train_chunk_2.jsonl").unlink()
    result = cache_flow(p)
    assert result["summary"]["chunks"] == 2
    assert megatron_files(out) == [f"train_chunk_{i}_text_document.{e}" for i in (0, 1) for e in ("bin", "idx")]
    assert documents(out / "train_chunk_1_text_document") == []
    merged = merge_output(str(out), str(tmp_path / "merged" / "all"))
    assert documents(merged["text"]) == expected(gpt2, c4_chunks, [0])
    assert not verify_output(str(out)).problems


def test_an_overwritten_run_leaves_no_file_of_its_old_settings(gpt2, gpt2_path, c4_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out, output_format="megatron", split_sentences=True))
    assert megatron_files(out)[0] == "train_chunk_0_text_sentence.bin"
    cache_flow(params(gpt2_path, c4_chunks, out, output_format="megatron", overwrite=True))
    assert megatron_files(out) == [f"train_chunk_{i}_text_document.{e}" for i in range(3) for e in ("bin", "idx")]
    assert not verify_output(str(out)).problems
    merged = merge_output(str(out), str(tmp_path / "merged" / "all"))
    assert merged == {"text": str(tmp_path / "merged" / "all_text_document")}
    assert documents(merged["text"]) == expected(gpt2, c4_chunks, range(3))


def test_merge_ignores_megatron_files_the_manifest_does_not_list(gpt2, gpt2_path, c4_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out, output_format="megatron"))
    for ext in (".bin", ".idx"):  # files of the right names that no run of this folder committed
        shutil.copy(out / f"train_chunk_2_text_document{ext}", out / f"train_chunk_0_text_sentence{ext}")
        shutil.copy(out / f"train_chunk_2_text_document{ext}", out / f"train_chunk_1_title_document{ext}")
    merged = merge_output(str(out), str(tmp_path / "merged" / "all"))
    assert merged == {"text": str(tmp_path / "merged" / "all_text_document")}
    assert documents(merged["text"]) == expected(gpt2, c4_chunks, range(3))


def test_verify_reports_a_bad_index_the_manifest_vouches_for(gpt2_path, c4_chunks, tmp_path):
    """A cache run's Megatron folder verifies clean; an index rewritten wrong with its manifest entry
    updated to match (what a writer's bug would leave) is reported by the structure check alone."""
    from pipeline_core.storage.hashing import file_digest
    from tests.pipeline_core.commit.test_verify_megatron import patch

    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out, output_format="megatron"))
    assert verify_output(str(out)).problems == {}
    name = "train_chunk_1_text_document.idx"
    idx = out / name
    count = struct.unpack("<Q", idx.read_bytes()[18:26])[0]  # the header's sequence count
    patch(idx, 34 + count * 4 + 8, 0)  # the second sequence's pointer: 0, as the first one's
    manifest = load_manifest(str(out))
    digest = file_digest(str(idx))
    manifest.entries[name] = dataclasses.replace(manifest.entries[name], sha256=digest.sha256, size=digest.size)
    save_manifest(str(out), manifest.to_json())
    assert verify_output(str(out)).problems == {name: ["sequence pointers are not back to back"]}
    (out / "train_chunk_2_text_document.idx").unlink()
    problems = verify_output(str(out)).problems
    assert problems["train_chunk_2_text_document.bin"] == ["no .idx beside it (a partial publish); rerun the stage"]
