"""h5_collate with a real DataLoader over real sft cache outputs, unpacked and packed: every sample
exactly once per epoch, int64 ids, labels -100 exactly where loss_mask is False (checked against the
processor's own masks), and F.cross_entropy takes the batch."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import numpy as np
import pytest
import torch
import torch.nn.functional as F
from hypothesis import given, settings
from hypothesis import strategies as st
from torch.utils.data import DataLoader

from pipeline_core import H5Dataset, ProcessorFactory, cache_jsonl, h5_collate, load_h5
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged
from pipeline_core.loader import H5Collate
from tests.conftest import load_json_or_jsonl


@pytest.fixture(scope="module")
def sft(trained, llamafactory, tmp_path_factory):
    """Three chunks of alpaca through the cache stage: unpacked, concat-packed and bfd-packed."""
    root = tmp_path_factory.mktemp("collate")
    rows = [
        {"query": r["instruction"], "response": r["output"]}
        for r in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")[:90]
    ]
    inputs = []
    for i, (start, stop) in enumerate([(0, 40), (40, 41), (41, 90)]):
        inputs.append(root / f"train_chunk_{i}.jsonl")
        inputs[-1].write_text("".join(json.dumps(r) + "\n" for r in rows[start:stop]))
    processor = ProcessorFactory.create("sft", trained)
    outputs = {
        "unpacked": cache_jsonl(inputs, root / "unpacked", processor),
        "concat": cache_jsonl(inputs, root / "concat", processor, pack_size=128, pad_value=0),
        "bfd": cache_jsonl(inputs, root / "bfd", processor, pack_size=512, pad_value=0, packing="bfd"),
    }
    return root, outputs, processor.process_batch(rows).samples


def flattened_labels(ids: torch.Tensor, mask, cu: torch.Tensor) -> torch.Tensor:
    """The pack's labels as transformers' DataCollatorWithFlattening makes them from its documents
    (-100 where not trained and at every document start), then -100 on the pads after them."""
    from transformers import DataCollatorWithFlattening

    bounds = cu.tolist()
    labels = torch.where(torch.as_tensor(mask), ids, -100)
    documents = [{"input_ids": ids[s:e].tolist(), "labels": labels[s:e].tolist()} for s, e in zip(bounds, bounds[1:])]
    flat = DataCollatorWithFlattening(return_tensors="pt")(documents)["labels"][0]
    return torch.cat([flat, torch.full((len(ids) - bounds[-1],), -100)])


def logits_for(batch, vocab: int) -> torch.Tensor:
    return torch.randn(*batch["input_ids"].shape, vocab)


def test_unpacked_batches_pad_to_the_longest_with_labels(sft, trained):
    root, _, expected = sft
    loader = DataLoader(H5Dataset(root / "unpacked", labels=True), batch_size=8, num_workers=2, collate_fn=h5_collate)
    seen = []
    for batch in loader:
        ids, attention, labels = batch["input_ids"], batch["attention_mask"], batch["labels"]
        assert ids.dtype == labels.dtype == attention.dtype == torch.int64
        lengths = attention.sum(1).tolist()
        assert ids.shape[1] == max(lengths)  # the batch's longest, not a global width
        for row, n in enumerate(lengths):
            i = len(seen)
            seen.append(ids[row, :n].tolist())
            mask = torch.from_numpy(expected["loss_mask"][i])
            want = torch.where(mask, torch.from_numpy(expected["sequence"][i]).long(), -100)
            assert torch.equal(labels[row, :n], want)  # -100 exactly where loss_mask is False
            assert (labels[row, n:] == -100).all() and (ids[row, n:] == 0).all() and (attention[row, n:] == 0).all()
        vocab = trained.vocab_size
        loss = F.cross_entropy(logits_for(batch, vocab).view(-1, vocab), labels.view(-1))
        assert torch.isfinite(loss)
    assert seen == expected["sequence"].to_lists()  # every sample once, in order


@pytest.mark.parametrize("packing", ["concat", "bfd"])
def test_packed_batches_keep_boundaries_per_item(sft, trained, packing):
    root, outputs, _ = sft
    stored = [load_h5(u) for u in outputs[packing]]
    rows = [tuple(r.tolist()) for s in stored for r in s["sequence"]]
    cus = {tuple(r.tolist()): c for s in stored for r, c in zip(s["sequence"], s["cu_seqlens"])}
    masks = {tuple(r.tolist()): m for s in stored for r, m in zip(s["sequence"], s["loss_mask"])}
    dataset = H5Dataset(root / packing, labels=True)
    loader = DataLoader(dataset, batch_size=8, num_workers=2, shuffle=True, collate_fn=h5_collate)
    seen = Counter()
    for batch in loader:
        ids, labels = batch["input_ids"], batch["labels"]
        assert ids.dtype == batch["position_ids"].dtype == torch.int64 and ids.shape[1] == dataset.attrs[0]["pack_size"]
        assert isinstance(batch["cu_seqlens"], list) and len(batch["cu_seqlens"]) == len(ids)
        for row, cu in enumerate(batch["cu_seqlens"]):
            key = tuple(ids[row].tolist())
            seen[key] += 1
            assert cu.dtype == torch.int32 and torch.equal(cu, torch.as_tensor(cus[key]))
            assert torch.equal(labels[row], flattened_labels(ids[row], masks[key], cu))
        assert "attention_mask" not in batch  # given one, HF models attend across a pack's documents
        vocab = trained.vocab_size
        assert torch.isfinite(F.cross_entropy(logits_for(batch, vocab).view(-1, vocab), labels.view(-1)))
    assert seen == Counter(rows)  # every pack exactly once per epoch


@pytest.mark.parametrize("keys", [["sequence", "loss_mask"], ["sequence", "loss_mask", "position_ids"]])
def test_packed_rows_keep_their_boundaries_whatever_keys_names(sft, keys):
    """keys=[...] that leave out cu_seqlens must not turn packs into padded samples: the batch would
    get an all-ones attention_mask and positions running across the documents of each pack."""
    root, outputs, _ = sft
    stored = load_h5(outputs["concat"][0])
    dataset = H5Dataset(root / "concat", keys=keys, labels=True)
    batch = h5_collate([dataset[i] for i in range(3)])
    assert "attention_mask" not in batch
    for row in range(3):
        cu = stored["cu_seqlens"][row].tolist()
        starts = set(cu[:-1])
        expected, position = [], 0
        for column in range(len(stored["sequence"][row])):  # 0 at each document start, by hand
            position = 0 if column in starts or column >= cu[-1] else position + 1
            expected.append(position)
        assert batch["position_ids"][row].tolist() == expected
        assert batch["cu_seqlens"][row].tolist() == cu


@pytest.mark.parametrize("packing", ["none", "concat", "bfd"])
def test_pt_files_get_labels_that_never_train_a_pad(gpt2, llamafactory, tmp_path, packing):
    """labels=True refused pt files (no loss_mask), leaving users to copy input_ids as labels and
    train the pads of every pack. Every real token trains; pads and document starts are -100, as
    DataCollatorWithFlattening makes them from the documents."""
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:30]
    source = tmp_path / "train_chunk_0.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    processor = ProcessorFactory.create("pt", gpt2)
    packed = {} if packing == "none" else {"pack_size": 512, "pad_value": 0, "packing": packing}
    [out] = cache_jsonl(source, tmp_path / "out", processor, **packed)
    stored = load_h5(out)
    dataset = H5Dataset(tmp_path / "out", labels=True)
    for i in range(len(dataset)):
        item = dataset[i]
        ids = torch.as_tensor(stored["sequence"][i]).long()
        if packing == "none":
            assert torch.equal(item["labels"], ids)
            continue
        cu = torch.as_tensor(stored["cu_seqlens"][i])
        real = torch.arange(len(ids)) < int(cu[-1])
        assert torch.equal(item["labels"], flattened_labels(ids, real, cu))
        assert (item["labels"][int(cu[-1]) :] == -100).all()


def test_narrow_stored_ids_come_back_int64(tmp_path):
    writer = H5Writer(str(tmp_path / "chunk_0.h5"))
    writer.append_ragged("sequence", Ragged.from_lists([[65535, 2, 3], [7]], dtype=np.uint16))
    writer.append_ragged("loss_mask", Ragged.from_lists([[0, 1, 1], [1]], dtype=bool))
    writer.close()
    for share in (False, True):
        dataset = H5Dataset(tmp_path, labels=True, share_memory=share)
        item = dataset[0]
        assert item["sequence"].dtype == torch.int64 and item["sequence"].tolist() == [65535, 2, 3]
        assert item["labels"].tolist() == [-100, 2, 3]
    batch = H5Collate(pad_id=9)([dataset[0], dataset[1]])
    assert batch["input_ids"].tolist() == [[65535, 2, 3], [7, 9, 9]]
    assert batch["labels"].tolist() == [[-100, 2, 3], [7, -100, -100]]
    assert batch["loss_mask"].tolist() == [[False, True, True], [True, False, False]]


def test_labels_need_a_mask_and_collate_pads_with_the_files_pad_id(sft, trained, tmp_path):
    root, _, _ = sft
    with pytest.raises(KeyError, match="labels=True needs a token key with its mask"):
        H5Dataset(root / "unpacked", keys=["sequence"], labels=True)
    assert H5Dataset(root / "unpacked").collate.pad_id == trained.token_to_id(trained.roles["pad"])
    with pytest.raises(ValueError, match="empty batch"):
        h5_collate([])


def test_dpo_style_keys_get_their_own_labels_and_masks(tmp_path):
    writer = H5Writer(str(tmp_path / "chunk_0.h5"))
    writer.append_ragged("chosen", Ragged.from_lists([[1, 2, 3], [4]]))
    writer.append_ragged("chosen_mask", Ragged.from_lists([[0, 1, 1], [1]], dtype=bool))
    writer.close()
    batch = h5_collate([H5Dataset(tmp_path, labels=True)[i] for i in range(2)])
    assert batch["chosen_labels"].tolist() == [[-100, 2, 3], [4, -100, -100]]
    assert batch["chosen_attention_mask"].tolist() == [[1, 1, 1], [1, 0, 0]]


def test_media_bytes_are_padded_with_zeros_and_get_no_attention_mask(tmp_path):
    """media is UTF-8 JSON bytes: H5Dataset widened it to int64 like ids, so the collate padded it
    with the pad id (2 here: not a valid padding byte, and a pad id >= 256 is no byte at all) and
    gave it an attention mask."""
    import json

    refs = [[], [{"type": "image_url", "value": "a.png", "message": 0}]]
    writer = H5Writer(str(tmp_path / "chunk_0.h5"))
    writer.append_ragged("sequence", Ragged.from_lists([[5, 6], [7]]))
    writer.append_ragged("media", Ragged.from_lists([list(json.dumps(r).encode()) for r in refs], dtype=np.uint8))
    writer.close()
    dataset = H5Dataset(tmp_path)
    assert dataset[0]["media"].dtype == torch.uint8
    batch = H5Collate(pad_id=2)([dataset[0], dataset[1]])
    assert "media_attention_mask" not in batch
    assert bytes(batch["media"][0].tolist()).rstrip(b"\x00") == b"[]"
    assert json.loads(bytes(batch["media"][1].tolist()).rstrip(b"\x00")) == refs[1]


def test_packed_media_come_as_one_list_per_pack(trained, llamafactory, tmp_path):
    """A pack's media (the JSON list of its documents' references) differ in length pack to pack:
    h5_collate stacked them and failed on every batch of a packed file kept with media."""
    from pipeline_core.converters.dataset_info import converter_from_dataset_info

    entry = json.loads((llamafactory / "dataset_info.json").read_text())["mllm_demo"]
    rows = load_json_or_jsonl(llamafactory / "mllm_demo.json")
    source = tmp_path / "train_chunk_0.jsonl"
    source.write_text("".join(json.dumps(r) + "\n" for r in rows))
    processor = ProcessorFactory.create("sft", trained, converter=converter_from_dataset_info(entry), media="keep")
    cache_jsonl(source, tmp_path / "out", processor, pack_size=96, pad_value=0)
    dataset = H5Dataset(tmp_path / "out")
    stored = [load_h5(u) for u in sorted(map(str, (tmp_path / "out").glob("*.h5")))]
    packs = [bytes(m.numpy()) for s in stored for m in s["media"]]
    assert len({len(p) for p in packs}) > 1  # packs of different media lengths, as stacking cannot hold
    batch = h5_collate([dataset[i] for i in range(len(dataset))])
    assert isinstance(batch["media"], list) and [bytes(m.tolist()) for m in batch["media"]] == packs
    assert all(m.dtype == torch.uint8 for m in batch["media"])
    assert batch["input_ids"].shape == (len(dataset), 96)


def test_importing_the_core_does_not_import_torch():
    code = "import sys, pipeline_core; assert 'torch' not in sys.modules; pipeline_core.h5_collate; assert 'torch' in sys.modules"
    subprocess.run([sys.executable, "-c", code], check=True)


@settings(max_examples=60, deadline=None)
@given(
    samples=st.lists(
        st.lists(st.tuples(st.integers(0, 70000), st.booleans()), min_size=1, max_size=20), min_size=1, max_size=9
    ),
    pad_id=st.integers(0, 5),
)
def test_unpacked_collate_is_undone_by_its_attention_mask(samples, pad_id):
    items = []
    for sample in samples:
        ids = torch.tensor([t for t, _ in sample], dtype=torch.int64)
        mask = torch.tensor([m for _, m in sample])
        items.append({"sequence": ids, "loss_mask": mask, "labels": torch.where(mask, ids, -100)})
    batch = H5Collate(pad_id)(items)
    width = max(len(s) for s in samples)
    assert batch["input_ids"].shape == batch["labels"].shape == (len(samples), width)
    for row, item in enumerate(items):
        n = int(batch["attention_mask"][row].sum())
        assert n == len(item["sequence"]) and batch["attention_mask"][row, :n].all()
        assert torch.equal(batch["input_ids"][row, :n], item["sequence"])
        assert torch.equal(batch["labels"][row, :n], item["labels"])
        assert (batch["input_ids"][row, n:] == pad_id).all() and (batch["labels"][row, n:] == -100).all()
        assert not batch["loss_mask"][row, n:].any()


@pytest.mark.parametrize("attention", ["eager", "sdpa"])
def test_a_packed_batch_computes_each_document_as_if_alone_in_a_hf_model(sft, trained, attention):
    """h5_collate's packed batch, given as is to a (tiny, random) transformers Llama: every
    document's logits equal those of the document run alone. With the 2-D attention_mask the
    collate gave before, documents attended to the ones before them in their pack."""
    from transformers import LlamaConfig, LlamaForCausalLM

    root, _, _ = sft
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=trained.vocab_size,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=4,
        max_position_embeddings=1024,
        attn_implementation=attention,
    )
    model = LlamaForCausalLM(config).eval()
    dataset = H5Dataset(root / "bfd", labels=True)
    several = [item for item in (dataset[i] for i in range(len(dataset))) if len(item["cu_seqlens"]) > 2]
    batch = h5_collate(several[:2])  # two packs of several documents each
    model_inputs = {k: v for k, v in batch.items() if k in ("input_ids", "attention_mask", "position_ids")}
    with torch.no_grad():
        packed = model(**model_inputs, use_cache=False).logits
        for row, cu in enumerate(batch["cu_seqlens"]):
            bounds = cu.tolist()
            for start, end in zip(bounds, bounds[1:]):
                alone = model(input_ids=batch["input_ids"][row : row + 1, start:end], use_cache=False).logits[0]
                assert torch.allclose(packed[row, start:end], alone, atol=1e-5)


@pytest.mark.parametrize("packing", ["concat", "bfd"])
def test_flash_attention_kwargs_are_what_transformers_derives_for_the_flattened_batch(sft, packing):
    """With flash_attn_kwargs a packed batch of B > 1 carries the varlen boundaries transformers'
    flash-attention path takes at any batch size: the ones it derives itself from position_ids
    flattened to one row (prepare_fa_kwargs_from_position_ids, used at batch size 1)."""
    from transformers.modeling_flash_attention_utils import prepare_fa_kwargs_from_position_ids

    root, _, _ = sft
    dataset = H5Dataset(root / packing, labels=True)
    collate = H5Collate(flash_attn_kwargs=True)
    for batch in DataLoader(dataset, batch_size=4, collate_fn=collate):
        (cu_q, cu_k), (max_q, max_k) = prepare_fa_kwargs_from_position_ids(batch["position_ids"].reshape(1, -1))
        assert batch["cu_seq_lens_q"].dtype == torch.int32 and torch.equal(batch["cu_seq_lens_q"], cu_q)
        assert torch.equal(batch["cu_seq_lens_k"], cu_k)
        assert batch["max_length_q"] == int(max_q) and batch["max_length_k"] == int(max_k)
        # every document of every pack is one segment, at its place in the flattened batch
        width = batch["input_ids"].shape[1]
        starts = set(batch["cu_seq_lens_q"].tolist())
        for row, cu in enumerate(batch["cu_seqlens"]):
            assert {row * width + b for b in cu.tolist()[:-1]} <= starts
    assert "cu_seq_lens_q" not in h5_collate([dataset[0], dataset[1]])


def test_full_packs_get_the_boundaries_of_datacollatorwithflattening(sft):
    """Packs without padding: the same cu_seq_lens as transformers' own flattening collator gives
    for the packs' documents laid end to end."""
    from transformers import DataCollatorWithFlattening

    root, _, _ = sft
    dataset = H5Dataset(root / "concat", labels=True)
    full = [item for item in (dataset[i] for i in range(len(dataset))) if int(item["cu_seqlens"][-1]) == 128][:3]
    assert len(full) == 3
    ours = H5Collate(flash_attn_kwargs=True)(full)
    documents = [
        {"input_ids": item["sequence"][a:b].tolist()}
        for item in full
        for a, b in zip(item["cu_seqlens"].tolist(), item["cu_seqlens"].tolist()[1:])
    ]
    theirs = DataCollatorWithFlattening(return_tensors="pt", return_flash_attn_kwargs=True)(documents)
    assert torch.equal(ours["cu_seq_lens_q"], theirs["cu_seq_lens_q"].to(torch.int32))
    assert ours["max_length_q"] == int(theirs["max_length_q"])
