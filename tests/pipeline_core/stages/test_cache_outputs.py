"""Packed cache outputs a trainer can use: position_ids, cu_seqlens, concat and bfd, utilisation."""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import CacheOptions, ConfigError, ProcessorFactory, cache_file, cache_jsonl, load_h5, read_attrs
from pipeline_core.formats.h5 import open_h5
from pipeline_core.formats.megatron import IndexedReader
from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.concat import DocumentConcatPacker
from pipeline_core.packing.packs import Packs
from tests.conftest import load_json_or_jsonl


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r, ensure_ascii=False) + "\n" for r in rows), encoding="utf-8")
    return path


def alpaca_rows(llamafactory):
    return [
        {"query": r["instruction"] + ("\n" + r["input"] if r["input"] else ""), "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")
    ]


def dpo_rows(llamafactory):
    rows = []
    for r in load_json_or_jsonl(llamafactory / "dpo_en_demo.json"):
        human = [t["value"] for t in r["conversations"] if t["from"] == "human"][-1]
        rows.append({"query": human, "chosen": r["chosen"]["value"], "rejected": r["rejected"]["value"]})
    return rows


def read_packed(url) -> dict[str, np.ndarray]:
    with open_h5(url) as f:
        return {k: f[k][...] for k in f}


def pack_documents(packed: dict, p: int) -> list[dict[str, np.ndarray]]:
    """The documents of pack p, cut at its cu_seqlens."""
    offsets = packed["cu_seqlens_offsets"]
    cu = packed["cu_seqlens"][offsets[p] : offsets[p + 1]]
    keys = [k for k, v in packed.items() if v.ndim == 2 and k != "position_ids"]
    return [{k: packed[k][p, a:b] for k in keys} for a, b in zip(cu[:-1], cu[1:])]


def check_boundaries(packed: dict, pad: int) -> None:
    """position_ids are 0 exactly at cu_seqlens starts, count up in between, 0 on pads."""
    offsets = packed["cu_seqlens_offsets"]
    n, size = packed["sequence"].shape
    # stored as uint16 (pack_size <= 65536, see stages/h5_sink.py); load_h5 reads them as int32
    assert packed["position_ids"].shape == (n, size) and packed["position_ids"].dtype == np.uint16
    assert packed["cu_seqlens"].dtype == np.int32 and offsets.size == n + 1
    for p in range(n):
        cu = packed["cu_seqlens"][offsets[p] : offsets[p + 1]]
        assert cu[0] == 0 and np.all(np.diff(cu) > 0) and cu[-1] <= size
        expected = np.zeros(size, dtype=np.int32)
        for a, b in zip(cu[:-1], cu[1:]):
            expected[a:b] = np.arange(b - a)
        np.testing.assert_array_equal(packed["position_ids"][p], expected)
        assert np.all(packed["sequence"][p, cu[-1] :] == pad)
        if "loss_mask" in packed:
            assert not packed["loss_mask"][p, cu[-1] :].any()


def test_concat_position_ids_restart_at_every_document_and_pack(gpt2, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:60]
    processor = ProcessorFactory.create("pt", gpt2)
    [out] = cache_jsonl(write_jsonl(tmp_path / "c4.jsonl", rows), tmp_path / "o", processor, pack_size=200, pad_value=0)
    packed = read_packed(out)
    check_boundaries(packed, pad=0)
    documents = processor.process_batch(rows).samples["sequence"]
    eos = gpt2.eos_token_id
    # Document starts: column 0 of every pack, plus every token following an eos.
    flat, positions = packed["sequence"].reshape(-1), packed["position_ids"].reshape(-1)
    used = int(documents.offsets[-1])
    starts = np.zeros(used, dtype=bool)
    starts[documents.offsets[:-1]] = True
    starts[:: packed["sequence"].shape[1]] = True
    np.testing.assert_array_equal(positions[:used] == 0, starts)
    np.testing.assert_array_equal(flat[:used], documents.values)
    assert int(np.sum(flat[:used] == eos)) == len(rows)
    attrs = read_attrs(out)
    assert attrs["packing"] == "concat" and attrs["position_ids_restart"] == "document_and_pack"
    assert attrs["lower_bound_packs"] == -(-used // 200) == attrs["packs"]


def test_bfd_never_splits_a_sample_and_keeps_masks_aligned(trained, llamafactory, tmp_path):
    rows = alpaca_rows(llamafactory)[:300]
    processor = ProcessorFactory.create("sft", trained)
    options = CacheOptions(pack_size=512, pad_value=trained.pad_token_id, packing="bfd", bfd_window=64)
    stats = cache_file(str(write_jsonl(tmp_path / "a.jsonl", rows)), str(tmp_path / "o"), processor, options)
    packed = read_packed(stats.output_url)
    check_boundaries(packed, pad=trained.pad_token_id)
    expected = processor.process_batch(rows).samples
    fits = [i for i in range(len(rows)) if len(expected["sequence"][i]) <= 512]
    want = Counter((tuple(expected["sequence"][i]), tuple(expected["loss_mask"][i])) for i in fits)
    got = Counter(
        (tuple(d["sequence"]), tuple(d["loss_mask"])) for p in range(stats.packs) for d in pack_documents(packed, p)
    )
    assert got == want  # every sample whole, once, with its own mask bits
    assert stats.samples_written == len(fits) and stats.rows_skipped == len(rows) - len(fits)
    assert stats.skipped.get("too_long_for_pack", 0) == len(rows) - len(fits)


def test_bfd_utilisation_is_within_3_percent_of_the_lower_bound_on_alpaca(trained, llamafactory, tmp_path):
    rows = alpaca_rows(llamafactory)
    processor = ProcessorFactory.create("sft", trained, max_length=1024, overflow="truncate")
    options = CacheOptions(pack_size=1024, pad_value=trained.pad_token_id, packing="bfd")
    stats = cache_file(str(write_jsonl(tmp_path / "a.jsonl", rows)), str(tmp_path / "o"), processor, options)
    assert stats.samples_written == len(rows)
    assert stats.lower_bound_packs == -(-stats.tokens_written // 1024)
    assert stats.packs <= 1.03 * stats.lower_bound_packs
    assert stats.pack_fill == pytest.approx(stats.tokens_written / (stats.packs * 1024))
    attrs = read_attrs(stats.output_url)
    assert (
        attrs["pack_fill"] == pytest.approx(stats.pack_fill) and attrs["lower_bound_packs"] == stats.lower_bound_packs
    )
    assert (attrs["packing"], attrs["bfd_window"], attrs["position_ids_restart"]) == ("bfd", 1000, "document")
    assert stats.to_dict()["pack_fill"] == stats.pack_fill


def test_bfd_truncates_over_long_samples_when_the_processor_truncates(trained, llamafactory, tmp_path):
    rows = alpaca_rows(llamafactory)[:200]
    processor = ProcessorFactory.create("sft", trained, overflow="truncate")
    options = CacheOptions(pack_size=128, pad_value=trained.pad_token_id, packing="bfd")
    stats = cache_file(str(write_jsonl(tmp_path / "a.jsonl", rows)), str(tmp_path / "o"), processor, options)
    expected = processor.process_batch(rows).samples
    # a sample whose prompt fills the pack would train nothing cut to it: skipped (prompt_too_long)
    untrained = {i for i in range(len(rows)) if not expected["loss_mask"][i][:128].any()}
    too_long = sum(len(expected["sequence"][i]) > 128 for i in range(len(rows)) if i not in untrained)
    assert too_long > 0 and stats.pack_truncated == too_long
    assert stats.samples_written == len(rows) - len(untrained) and stats.skipped == {"prompt_too_long": len(untrained)}
    packed = read_packed(stats.output_url)
    check_boundaries(packed, pad=trained.pad_token_id)
    want = Counter(tuple(expected["sequence"][i][:128]) for i in range(len(rows)) if i not in untrained)
    got = Counter(tuple(d["sequence"]) for p in range(stats.packs) for d in pack_documents(packed, p))
    assert got == want
    assert read_attrs(stats.output_url)["pack_truncated"] == too_long


def test_dpo_bfd_puts_chosen_and_rejected_of_a_pair_in_one_pack(trained, llamafactory, tmp_path):
    rows = dpo_rows(llamafactory)[:120]
    processor = ProcessorFactory.create("dpo", trained)
    options = CacheOptions(pack_size=1024, pad_value=trained.pad_token_id, packing="bfd", bfd_window=50)
    stats = cache_file(str(write_jsonl(tmp_path / "d.jsonl", rows)), str(tmp_path / "o"), processor, options)
    packed = read_packed(stats.output_url)
    assert {"sequence", "loss_mask", "position_ids", "cu_seqlens"} <= set(packed)
    check_boundaries(packed, pad=trained.pad_token_id)
    expected = processor.process_batch(rows).samples
    pairs = {}
    for i in range(len(rows)):
        c, r = expected["chosen"][i], expected["rejected"][i]
        if len(c) + len(r) <= 1024:
            pairs[(tuple(c), tuple(expected["chosen_mask"][i]))] = (tuple(r), tuple(expected["rejected_mask"][i]))
    found = 0
    for p in range(stats.packs):
        docs = [(tuple(d["sequence"]), tuple(d["loss_mask"])) for d in pack_documents(packed, p)]
        assert len(docs) % 2 == 0
        for chosen, rejected in zip(docs[::2], docs[1::2]):
            assert pairs[chosen] == rejected  # the pair's rejected follows its chosen, in the same pack
            found += 1
    assert found == stats.samples_written == len(pairs)
    assert stats.skipped.get("pair_too_long_for_pack", 0) == len(rows) - len(pairs)


def test_dpo_concat_is_refused_with_the_fix(trained, tmp_path):
    path = write_jsonl(tmp_path / "d.jsonl", [{"query": "q", "chosen": "a", "rejected": "b"}])
    with pytest.raises(ConfigError, match="packing='bfd'"):
        cache_jsonl(path, tmp_path / "o", ProcessorFactory.create("dpo", trained), pack_size=64)


def test_bfd_over_long_sample_under_raise_names_the_line(trained, tmp_path):
    from pipeline_core import BadRowError

    rows = [{"query": "hi", "response": "short"}, {"query": "hi", "response": "word " * 400}]
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    processor = ProcessorFactory.create("sft", trained)
    with pytest.raises(BadRowError, match=r"a\.jsonl:2: .*pack_size 64.*packing='concat'"):
        cache_jsonl(path, tmp_path / "o", processor, pack_size=64, pad_value=0, packing="bfd", on_error="raise")
    [out] = cache_jsonl(path, tmp_path / "o", processor, pack_size=64, pad_value=0, packing="bfd")
    errors = [json.loads(line) for line in (tmp_path / "o" / "a.errors.jsonl").read_text().splitlines()]
    assert [(e["line"], e["reason"]) for e in errors] == [(2, "too_long_for_pack")]
    assert read_attrs(out)["rows_read"] == 2 and len(load_h5(out)["cu_seqlens"]) == 1


@pytest.mark.parametrize(
    ("options", "message"),
    [
        (dict(packing="greedy"), "packing='greedy' is unknown"),
        (dict(output_format="parquet"), "output_format='parquet' is unknown"),
        (dict(pack_size=64, output_format="megatron"), "output_format='both'"),
        (dict(pack_size=64, split_sentences=True), "split_sentences=False or pack_size=0"),
        (dict(pack_size=64, packing="bfd", output_format="both"), "missing from the Megatron files.*concat"),
        (dict(bfd_window=0), "bfd_window must be positive"),
    ],
)
def test_impossible_options_say_how_to_fix_them(options, message):
    with pytest.raises(ConfigError, match=message):
        CacheOptions(**options)


def test_the_megatron_files_of_a_bfd_run_would_lose_documents(trained, tmp_path):
    """bfd's fit ran on the batch both outputs are written from: the samples too long for a pack were
    gone from the unpacked Megatron files too, which preprocess_data.py keeps. Such runs are refused;
    concat keeps every token in both outputs."""
    rows = [{"query": "hi", "response": "short"}, {"query": "hi", "response": "word " * 400}]
    path = write_jsonl(tmp_path / "a.jsonl", rows)
    processor = ProcessorFactory.create("sft", trained)
    with pytest.raises(ConfigError, match="packing='concat'"):
        cache_jsonl(path, tmp_path / "bfd", processor, pack_size=64, pad_value=0, packing="bfd", output_format="both")
    cache_jsonl(path, tmp_path / "concat", processor, pack_size=64, pad_value=0, output_format="both")
    idx = tmp_path / "concat" / "a_sequence_document.idx"
    expected = processor.process_batch(rows).samples["sequence"]
    reader = IndexedReader(str(idx)[: -len(".idx")])
    assert [reader[i].tolist() for i in range(len(reader))] == [expected[i].tolist() for i in range(len(rows))]


def test_settings_are_recorded_and_unpacked_keys_unchanged(gpt2, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:20]
    [out] = cache_jsonl(write_jsonl(tmp_path / "c.jsonl", rows), tmp_path / "o", ProcessorFactory.create("pt", gpt2))
    attrs = read_attrs(out)
    assert (attrs["packing"], attrs["output_format"], attrs["split_sentences"]) == ("none", "hdf5", False)
    assert attrs["complete"] and attrs["pack_fill"] is None and attrs["megatron_keys"] == []
    assert set(load_h5(out)) == {"sequence"}


def test_a_failing_chunk_leaves_no_output_at_all(gpt2, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:20]
    processor = ProcessorFactory.create("pt", gpt2)
    calls = []

    def failing(batch_rows, real=processor.process_batch):
        calls.append(1)
        if len(calls) == 2:
            raise RuntimeError("tokenizer died")
        return real(batch_rows)

    processor.process_batch = failing
    path = write_jsonl(tmp_path / "c.jsonl", rows)
    with pytest.raises(RuntimeError, match="tokenizer died"):
        cache_jsonl(path, tmp_path / "o", processor, batch_size=8, output_format="both", pack_size=64, pad_value=0)
    assert list((tmp_path / "o").iterdir()) == []


@settings(max_examples=80, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(1, 30), max_size=8), max_size=6),
    pack_size=st.integers(1, 24),
)
def test_concat_boundaries_match_a_plain_python_model(batches, pack_size):
    """Every piece of every document, per pack, against lists built token by token."""
    packer = DocumentConcatPacker(pack_size, pad_value=-1, length_key="sequence")
    parts, doc = [], 0
    for lengths in batches:
        seqs = [np.arange(n, dtype=np.int32) + 1000 * (doc + i) for i, n in enumerate(lengths)]
        weights = [np.full(n, 0.5, np.float32) for n in lengths]
        doc += len(lengths)
        parts.append(packer.add({"sequence": Ragged.from_lists(seqs), "w": Ragged.from_lists(weights, np.float32)}))
    packs = Packs.concat([*parts, packer.flush()])
    tokens = [(d, i) for d, n in enumerate(n for b in batches for n in b) for i in range(n)]
    rows = [tokens[s : s + pack_size] for s in range(0, len(tokens), pack_size)]
    assert len(packs) == len(rows)
    for p, row in enumerate(rows):
        pieces = [d for j, (d, _) in enumerate(row) if j == 0 or row[j - 1][0] != d]
        starts = [j for j, (d, _) in enumerate(row) if j == 0 or row[j - 1][0] != d]
        assert packs.sample_ids_of(p).tolist() == pieces
        assert packs.cu_seqlens_of(p).tolist() == [*starts, len(row)]
        positions = [j - max(s for s in starts if s <= j) for j in range(len(row))]
        assert packs.position_ids[p].tolist() == positions + [0] * (pack_size - len(row))
        assert packs.arrays["sequence"][p].tolist() == [1000 * d + i for d, i in row] + [-1] * (pack_size - len(row))
        assert packs.arrays["w"][p].tolist() == [0.5] * len(row) + [0.0] * (pack_size - len(row))


def test_inputs_that_would_share_an_output_name_are_refused_before_anything_is_written(tmp_path, gpt2):
    inputs = []
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        inputs.append(str(write_jsonl(tmp_path / folder / "x.jsonl", [{"text": f"from {folder}"}])))
    with pytest.raises(ConfigError) as refused:
        cache_jsonl(inputs, str(tmp_path / "out"), ProcessorFactory.create("pt", gpt2))
    message = str(refused.value)
    assert inputs[0] in message and inputs[1] in message and "x.h5" in message and "rename one of them" in message
    assert list((tmp_path / "out").iterdir()) == []


def _all_ignored(folder) -> int:
    """Packs a trainer gets with every label -100 (H5Dataset's labels, as DataCollatorWithFlattening)."""
    from pipeline_core import H5Dataset

    dataset = H5Dataset(str(folder), labels=True)
    return sum(bool((dataset[i]["labels"] == -100).all()) for i in range(len(dataset)))


def test_concat_counts_the_packs_that_hold_no_trained_token(trained, llamafactory, tmp_path):
    rows = alpaca_rows(llamafactory)[:200]
    rows[5]["query"] = " ".join(["a long prompt"] * 200)  # a prompt that fills several packs alone
    processor = ProcessorFactory.create("sft", trained)
    options = CacheOptions(pack_size=64, pad_value=trained.pad_token_id, packing="concat")
    stats = cache_file(str(write_jsonl(tmp_path / "a.jsonl", rows)), str(tmp_path / "o"), processor, options)
    want = _all_ignored(tmp_path / "o")
    assert want >= 3  # row 5's prompt alone fills packs
    assert stats.untrained_packs == want and read_attrs(stats.output_url)["untrained_packs"] == want


def test_a_pack_trained_only_at_column_0_counts_as_untrained(gpt2, tmp_path):
    """The last trained token of a sample continued at column 0 of the next pack has label -100
    there (a segment start: nothing in the pack predicts it), so that pack trains nothing."""
    processor = ProcessorFactory.create_with_strategy_name("sft", gpt2, "chatml", text_markers=True)
    rows = [
        {"query": "What is two plus two?", "response": "Four."},
        {"query": "a long prompt " * 60, "response": "ok."},
    ]
    mask = processor.process_batch(rows).samples["loss_mask"][0]
    pack_size = int(np.flatnonzero(mask)[-1])  # sample 0's last trained token opens pack 1
    options = CacheOptions(pack_size=pack_size, pad_value=0, packing="concat")
    stats = cache_file(str(write_jsonl(tmp_path / "a.jsonl", rows)), str(tmp_path / "o"), processor, options)
    with open_h5(stats.output_url) as f:
        assert f["loss_mask"][1, 0] and not f["loss_mask"][1, 1:].any()  # the case itself
    assert stats.untrained_packs == _all_ignored(tmp_path / "o") >= 2


def test_bfd_and_pretraining_packs_are_never_untrained(trained, llamafactory, tmp_path):
    rows = alpaca_rows(llamafactory)[:100]
    sft = ProcessorFactory.create("sft", trained, max_length=60, overflow="truncate")
    options = CacheOptions(pack_size=64, pad_value=trained.pad_token_id, packing="bfd")
    stats = cache_file(str(write_jsonl(tmp_path / "a.jsonl", rows)), str(tmp_path / "o"), sft, options)
    assert stats.packs > 0 and stats.untrained_packs == 0
    pt = ProcessorFactory.create("pt", trained)
    texts = write_jsonl(tmp_path / "t.jsonl", [{"text": r["query"]} for r in rows])
    stats = cache_file(str(texts), str(tmp_path / "p"), pt, CacheOptions(pack_size=64, pad_value=0))
    assert stats.packs > 0 and stats.untrained_packs == 0
