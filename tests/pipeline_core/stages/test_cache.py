"""cache_jsonl round trips: what load_h5 returns equals what the processor produced."""

import json

import numpy as np
import pytest
import torch

from pipeline_core import BadRowError, ProcessorFactory, SequencePacker, cache_jsonl, load_h5, read_attrs
from pipeline_core.formats.h5 import OFFSETS_SUFFIX, open_h5
from tests.conftest import load_json_or_jsonl


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


@pytest.fixture()
def sft_input(tmp_path, llamafactory):
    rows = [
        {"query": r["instruction"], "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")
    ]
    return write_jsonl(tmp_path / "train_chunk_0.jsonl", rows), rows


def test_unpacked_round_trip(trained, sft_input, tmp_path):
    path, rows = sft_input
    processor = ProcessorFactory.create("sft", trained)
    [out] = cache_jsonl(path, tmp_path / "h5", processor, batch_size=100)
    assert out.endswith("/train_chunk_0.h5")
    loaded = load_h5(out)
    expected = processor.process_batch(rows)
    assert len(loaded["sequence"]) == len(rows)
    for i in range(len(rows)):
        assert loaded["sequence"][i].tolist() == expected.samples["sequence"][i].tolist()
        assert loaded["loss_mask"][i].tolist() == expected.samples["loss_mask"][i].tolist()
    attrs = read_attrs(out)
    assert attrs["complete"] is True or attrs["complete"] == 1
    assert attrs["processor"] == "sft" and attrs["strategy"] == "chatml"
    assert attrs["strategy_tokens"]["user_start"] == "<｜im▁start｜>user\n"
    assert attrs["tokenizer_fingerprint"] == trained.fingerprint
    assert attrs["vocab_size"] == trained.vocab_size
    assert (attrs["bos_id"], attrs["eos_id"], attrs["pad_id"]) == (
        trained.bos_token_id,
        trained.eos_token_id,
        trained.pad_token_id,
    )
    assert attrs["rows_read"] == attrs["samples_written"] == len(rows)
    assert attrs["tokens_written"] == int(expected.samples["sequence"].offsets[-1])
    import hashlib

    assert attrs["source_sha256"] == hashlib.sha256(path.read_bytes()).hexdigest()


def test_packed_round_trip_and_offsets_layout(trained, sft_input, tmp_path):
    path, rows = sft_input
    processor = ProcessorFactory.create("sft", trained)
    [out] = cache_jsonl(path, tmp_path / "h5", processor, pack_size=512, batch_size=64)
    loaded = load_h5(out)
    expected = processor.process_batch(rows).samples
    reference = SequencePacker(512, pad_value=trained.pad_id).pack(
        {
            "sequence": list(expected["sequence"].to_lists()),
            "loss_mask": [expected["loss_mask"][i] for i in range(len(rows))],
        }
    )
    assert loaded["sequence"].shape[1] == 512
    assert np.array_equal(loaded["sequence"].numpy(), reference["sequence"].numpy())
    assert np.array_equal(loaded["loss_mask"].numpy(), reference["loss_mask"].numpy())
    attrs = read_attrs(out)
    assert (
        attrs["pack_size"] == 512
        and attrs["pad_value"] == trained.pad_id
        and attrs["packs"] == len(reference["sequence"])
    )
    with open_h5(out) as f:
        assert "sequence" + OFFSETS_SUFFIX not in f


def test_variable_length_layout_is_flat_plus_offsets(gpt2, llamafactory, tmp_path):
    [out] = cache_jsonl(llamafactory / "c4_demo.jsonl", tmp_path, ProcessorFactory.create("pt", gpt2))
    with open_h5(out) as f:
        data, offsets = f["sequence"][...], f["sequence_offsets"][...]
        # GPT-2's 50257 ids fit uint16 (stages/h5_sink.py); the readers give them back as int32
        assert data.ndim == 1 and data.dtype == np.uint16 and offsets.dtype == np.int64
        assert offsets[0] == 0 and offsets[-1] == data.size and np.all(np.diff(offsets) > 0)
        assert len(offsets) == 301
    loaded = load_h5(str(out))["sequence"]
    assert loaded[0].dtype == torch.int32 and torch.equal(torch.cat(loaded), torch.from_numpy(data.astype(np.int32)))


def test_share_memory(gpt2, llamafactory, tmp_path):
    [out] = cache_jsonl(
        llamafactory / "c4_demo.jsonl", tmp_path, ProcessorFactory.create("pt", gpt2), pack_size=256, pad_value=0
    )
    packed = load_h5(out, share_memory=True)
    assert packed["sequence"].is_shared()
    [out2] = cache_jsonl(llamafactory / "c4_demo.jsonl", tmp_path / "u", ProcessorFactory.create("pt", gpt2))
    assert all(t.is_shared() for t in load_h5(out2, share_memory=True)["sequence"])


BAD_LINES = [
    '{"text": "good one"}',
    '{"text": "broken json"',
    '{"other": "missing field"}',
    '{"text": ""}',
    '{"text": "good two"}',
]


def test_bad_rows_raise_names_file_line_and_field(gpt2, tmp_path):
    path = tmp_path / "dirty.jsonl"
    path.write_text("\n".join([BAD_LINES[0], BAD_LINES[2]]) + "\n")
    with pytest.raises(BadRowError) as err:
        cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2), on_error="raise")
    assert f"{path}:2" in str(err.value) and "'text'" in str(err.value)
    assert not (tmp_path / "out" / "dirty.h5").exists()
    path.write_text("\n".join(BAD_LINES[:2]) + "\n")
    with pytest.raises(BadRowError, match=r"dirty.jsonl:2: .*not valid JSON"):
        cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2), on_error="raise")


def test_bad_rows_skip_writes_errors_file_and_counts(gpt2, tmp_path):
    path = tmp_path / "dirty.jsonl"
    path.write_text("\n".join(BAD_LINES) + "\n")
    [out] = cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2), batch_size=2)
    attrs = read_attrs(out)
    assert attrs["rows_read"] == 5 and attrs["samples_written"] == 2 and attrs["rows_skipped"] == 3
    assert attrs["rows_read"] == attrs["samples_written"] + attrs["rows_skipped"]
    assert attrs["skipped_by_reason"] == {"invalid_json": 1, "missing_field": 1, "empty_text": 1}
    errors = [json.loads(line) for line in (tmp_path / "out" / "dirty.errors.jsonl").read_text().splitlines()]
    assert [(e["line"], e["reason"], e["field"]) for e in errors] == [
        (2, "invalid_json", None),
        (3, "missing_field", "text"),
        (4, "empty_text", "text"),
    ]
    decoded = [gpt2.decode(t[:-1].tolist()) for t in load_h5(out)["sequence"]]
    assert decoded == ["good one", "good two"]


def test_clean_rerun_removes_stale_errors_file(gpt2, tmp_path):
    path = tmp_path / "c.jsonl"
    path.write_text("\n".join(BAD_LINES) + "\n")
    cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2))
    path.write_text(BAD_LINES[0] + "\n")
    cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2))
    assert not (tmp_path / "out" / "c.errors.jsonl").exists()


def test_folder_input_and_memory_filesystem(gpt2, tmp_path):
    import fsspec

    fs = fsspec.filesystem("memory")
    for i in range(3):
        with fs.open(f"/in/train_chunk_{i}.jsonl", "wb") as f:
            f.write(b'{"text": "chunk %d"}\n' % i)
    outs = cache_jsonl("memory://in", "memory://out", ProcessorFactory.create("pt", gpt2))
    assert outs == [f"memory://out/train_chunk_{i}.h5" for i in range(3)]
    assert gpt2.decode(load_h5(outs[2])["sequence"][0][:-1].tolist()) == "chunk 2"


def test_dpo_refuses_concat_packing(trained, tmp_path):
    from pipeline_core import ConfigError

    path = write_jsonl(tmp_path / "d.jsonl", [{"query": "q", "chosen": "a", "rejected": "b"}])
    with pytest.raises(ConfigError, match="pack_size=0"):
        cache_jsonl(path, tmp_path / "o", ProcessorFactory.create("dpo", trained), pack_size=64)
    [out] = cache_jsonl(path, tmp_path / "o", ProcessorFactory.create("dpo", trained))
    assert set(load_h5(out)) == {"chosen", "chosen_mask", "rejected", "rejected_mask"}
