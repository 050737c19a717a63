"""Megatron output of the cache stage, read back by megatron-core's own IndexedDataset."""

from __future__ import annotations

import json

import numpy as np
import pytest

from pipeline_core import CacheOptions, ProcessorFactory, cache_file, cache_jsonl, load_h5, merge_megatron
from pipeline_core.formats.h5 import open_h5
from tests.conftest import load_json_or_jsonl
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def megatron(prefix) -> tuple[list[list[int]], list[int], np.dtype]:
    dataset = _megatron_indexed_dataset()(str(prefix))
    return [dataset[i].tolist() for i in range(len(dataset))], dataset.document_indices.tolist(), dataset.index.dtype


@pytest.fixture()
def c4_chunks(llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:90]
    return [write_jsonl(tmp_path / f"train_chunk_{i}.jsonl", rows[i * 30 : (i + 1) * 30]) for i in range(3)]


def test_megatron_reads_exactly_the_stored_sequences(gpt2, c4_chunks, tmp_path):
    stats = cache_file(
        str(c4_chunks[0]), str(tmp_path / "o"), ProcessorFactory.create("pt", gpt2), CacheOptions(output_format="both")
    )
    stored = [t.tolist() for t in load_h5(stats.output_url)["sequence"]]
    assert stats.megatron_prefixes == {"text": str(tmp_path / "o" / "train_chunk_0_text_document")}  # Megatron's names
    seqs, documents, dtype = megatron(stats.megatron_prefixes["text"])
    assert seqs == stored and documents == list(range(len(stored) + 1))
    assert np.dtype(dtype) == np.uint16  # gpt2's 50257 ids fit


def test_sft_masks_and_dpo_pairs_get_their_own_files(trained, llamafactory, tmp_path):
    rows = [
        {"query": r["instruction"], "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")[:40]
    ]
    processor = ProcessorFactory.create("sft", trained)
    stats = cache_file(
        str(write_jsonl(tmp_path / "s.jsonl", rows)),
        str(tmp_path / "o"),
        processor,
        CacheOptions(output_format="megatron"),
    )
    expected = processor.process_batch(rows).samples
    assert sorted(stats.megatron_prefixes) == ["loss_mask", "sequence"] and stats.output_url == ""
    masks, _, dtype = megatron(stats.megatron_prefixes["loss_mask"])
    assert np.dtype(dtype) == np.uint8 and masks == [expected["loss_mask"][i].astype(int).tolist() for i in range(40)]
    assert megatron(stats.megatron_prefixes["sequence"])[0] == expected["sequence"].to_lists()
    assert not (tmp_path / "o" / "s.h5").exists()

    pairs = [{"query": f"q{i}", "chosen": f"yes {i}", "rejected": f"no {i} " * 2} for i in range(10)]
    dpo = ProcessorFactory.create("dpo", trained)
    out = cache_jsonl(write_jsonl(tmp_path / "d.jsonl", pairs), tmp_path / "o", dpo, output_format="megatron")
    assert sorted(p.rsplit("/", 1)[-1] for p in out) == [
        f"d_{k}_document" for k in ("chosen", "chosen_mask", "rejected", "rejected_mask")
    ]
    expected = dpo.process_batch(pairs).samples
    assert megatron(tmp_path / "o" / "d_rejected_document")[0] == expected["rejected"].to_lists()


def test_packed_hdf5_with_unpacked_megatron(gpt2, c4_chunks, tmp_path):
    stats = cache_file(
        str(c4_chunks[1]),
        str(tmp_path / "o"),
        ProcessorFactory.create("pt", gpt2),
        CacheOptions(pack_size=128, pad_value=0, output_format="both"),
    )
    seqs, _, _ = megatron(stats.megatron_prefixes["text"])
    with open_h5(stats.output_url) as f:
        packed = f["sequence"][...]
    flat = [t for s in seqs for t in s]
    assert packed.reshape(-1)[: len(flat)].tolist() == flat and len(seqs) == stats.samples_written == 30


@pytest.mark.parametrize("output_dir", ["local", "memory://merge-out"])
def test_merged_chunks_equal_the_concatenation(gpt2, c4_chunks, tmp_path, output_dir):
    out = str(tmp_path / "o") if output_dir == "local" else output_dir
    processor = ProcessorFactory.create("pt", gpt2)
    stats = [cache_file(str(c), out, processor, CacheOptions(output_format="both")) for c in c4_chunks]
    merged = merge_megatron([s.megatron_prefixes for s in stats], f"{out}/all")
    assert merged == {"text": f"{out}/all_text_document"}
    local = merged["text"]
    if output_dir != "local":
        import fsspec

        fs = fsspec.filesystem("memory")
        for ext in (".bin", ".idx"):
            (tmp_path / f"all{ext}").write_bytes(fs.cat(local.split("://", 1)[1] + ext))
        local = str(tmp_path / "all")
    seqs, documents, _ = megatron(local)
    expected = [t.tolist() for s in stats for t in load_h5(s.output_url)["sequence"]]
    assert seqs == expected and documents == list(range(len(expected) + 1))


def test_merge_refuses_chunks_with_different_keys(tmp_path):
    with pytest.raises(ValueError, match="'loss_weight' has no key it stands for in that chunk"):
        merge_megatron([{"sequence": "a", "loss_weight": "b"}, {"sequence": "c"}], str(tmp_path / "all"))


def test_merge_refuses_chunks_of_sentences_beside_chunks_of_documents(tmp_path):
    with pytest.raises(ValueError, match=r"mix levels \['document', 'sentence'\]"):
        merge_megatron([{"text": "a/c_text_document"}, {"text": "a/d_text_sentence"}], str(tmp_path / "all"))
    assert not list(tmp_path.iterdir())  # refused before writing


@pytest.mark.parametrize(
    ("output_format", "recorded", "expected"),
    [
        ("hdf5", None, "s3://b/out/train_chunk_3.h5"),
        ("both", "s3://b/out/train_chunk_3_sequence_document.idx", "s3://b/out/train_chunk_3.h5"),
        (
            "megatron",
            "s3://b/out/train_chunk_3_sequence_document.idx",
            "s3://b/out/train_chunk_3_sequence_document.idx",
        ),
        ("megatron", None, "s3://b/out/train_chunk_3.h5"),  # nothing recorded: a name no run writes
        ("megatron", "s3://b/out/train_chunk_30_sequence_document.idx", "s3://b/out/train_chunk_3.h5"),
        ("megatron", "s3://b/other/train_chunk_3_sequence_document.idx", "s3://b/out/train_chunk_3.h5"),
        ("megatron", "s3://b/out/train_chunk_3__document.idx", "s3://b/out/train_chunk_3.h5"),
    ],
)
def test_standing_output_is_the_recorded_idx_only_for_megatron_only_chunks(output_format, recorded, expected):
    from pipeline_core.stages.outputs import standing_output

    assert standing_output("s3://b/in/train_chunk_3.jsonl", "s3://b/out", output_format, recorded) == expected


def _turns(i: int, weight: float) -> dict:
    return {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": f"question {i}"}]},
            {"role": "assistant", "content": [{"type": "text", "value": f"answer {i}"}], "loss_weight": weight},
        ]
    }


def test_merge_makes_up_a_deferred_key_a_chunk_left_out_from_its_mask(trained, tmp_path):
    """Chunk 0 has fractional weights (loss_weight written), chunk 1 only 0/1 ones (left out: it
    equals loss_mask); the merged loss_weight holds every document's weights, read by megatron-core."""
    processor = ProcessorFactory.create("sft", trained)
    chunks = [[_turns(i, 0.5) for i in range(4)], [_turns(i, 1.0) for i in range(4, 9)]]
    options = CacheOptions(output_format="megatron")
    stats = [
        cache_file(str(write_jsonl(tmp_path / f"c{i}.jsonl", rows)), str(tmp_path / "o"), processor, options)
        for i, rows in enumerate(chunks)
    ]
    assert [sorted(s.megatron_prefixes) for s in stats] == [
        ["loss_mask", "loss_weight", "sequence"],
        ["loss_mask", "sequence"],
    ]
    maps = [s.megatron_prefixes for s in stats]
    merged = merge_megatron(maps, str(tmp_path / "m" / "all"), stand_ins=ProcessorFactory.deferred_stand_ins())
    weights, documents, dtype = megatron(merged["loss_weight"])
    expected = [w.tolist() for rows in chunks for w in processor.process_batch(rows).samples["loss_weight"]]
    assert weights == expected and documents == list(range(10))
    assert np.dtype(dtype) == np.float32 and {0.5, 1.0} <= {w for s in weights for w in s}
    masks, _, _ = megatron(merged["loss_mask"])
    assert [[w > 0 for w in s] for s in weights] == [[bool(m) for m in s] for s in masks]
