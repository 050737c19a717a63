"""Sentence-level output: lossless splitting, EOS only at document ends, documents kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import CacheOptions, ConfigError, ProcessorFactory, cache_file, load_h5
from pipeline_core.formats.h5 import open_h5
from pipeline_core.processors.sentences import (
    SENTENCE_LENGTHS,
    SentenceProcessor,
    sentence_ends,
    sentence_lengths,
    sentence_splitter,
)
from tests.conftest import load_json_or_jsonl
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset

TEXT = "Dr. Smith went to Washington. He arrived at 5 p.m. on Jan. 3rd!  Was it fun?\nYes."


def test_sentences_end_where_the_splitter_ends_them():
    pieces = ["Dr. Smith went to Washington.", " He arrived at 5 p.m. on Jan. 3rd!", "  Was it fun?", "\nYes."]
    assert "".join(pieces) == TEXT
    ends = np.cumsum([len(p) for p in pieces])[:-1].tolist()
    assert sentence_ends(TEXT, sentence_splitter()) == ends


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_sentence_cuts_partition_any_text_and_its_tokens(text):
    ends = sentence_ends(text, sentence_splitter())
    assert ends == sorted(ends) and all(0 < e < len(text) for e in ends)
    starts = np.sort(np.random.default_rng(len(text)).integers(0, len(text), size=len(text) // 3))
    lengths = sentence_lengths(starts, ends)
    assert lengths.sum() == starts.size and (lengths > 0).all() or lengths.tolist() == [0]


QWEN2_SPLIT = r"""(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"""


def qwen2_style(llamafactory):
    """A byte-level BPE with Qwen2's / Llama-3's pre-tokenizer: punctuation and the newlines after
    it are one pre-token (".\n"), so a sentence cut between them changes the tokens."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    split = pre_tokenizers.Split(Regex(QWEN2_SPLIT), behavior="isolated")
    tok.pre_tokenizer = pre_tokenizers.Sequence(
        [split, pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)]
    )
    tok.decoder = decoders.ByteLevel()
    texts = [r["text"] for r in load_json_or_jsonl(llamafactory / "c4_demo.jsonl")]
    alphabet = pre_tokenizers.ByteLevel.alphabet()
    trainer = trainers.BpeTrainer(
        vocab_size=3000, special_tokens=["</s>"], initial_alphabet=alphabet, show_progress=False
    )
    tok.train_from_iterator(texts, trainer)
    return tok


@pytest.mark.parametrize("kind", ["gpt2", "qwen2_style", "metaspace", "legacy_llama2"])
def test_a_documents_sentences_join_back_to_its_unsplit_tokens_with_any_tokenizer(
    kind, llamafactory, gpt2_path, tmp_path
):
    """Each sentence tokenized on its own gave other tokens at the cuts with Qwen2/Llama-3-style
    tokenizers, and an extra ▁ per sentence with SentencePiece ones. The reference: raw tokenizers
    on the whole text, plus eos."""
    from tokenizers import Tokenizer

    from pipeline_core import AutoTokenizer
    from tests.pipeline_core.chat.families import legacy_llama2_tokenizer, metaspace_tokenizer

    builders = {
        "gpt2": lambda: Tokenizer.from_file(str(gpt2_path)),
        "qwen2_style": lambda: qwen2_style(llamafactory),
        "metaspace": metaspace_tokenizer,
        "legacy_llama2": legacy_llama2_tokenizer,
    }
    raw = builders[kind]()
    raw.add_special_tokens(["</s>"])
    raw.save(str(tmp_path / "tokenizer.json"))
    tok = AutoTokenizer.from_file(tmp_path / "tokenizer.json", eos_token="</s>")
    texts = [TEXT, "Hello world.\n\nSecond paragraph here. Third one!", "One sentence only"]
    texts += [r["text"] for r in load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:40]]
    batch = SentenceProcessor(ProcessorFactory.create("pt", tok)).process_batch([{"text": t} for t in texts])
    assert not batch.errors
    eos = raw.token_to_id("</s>")
    for d, text in enumerate(texts):
        assert batch.samples["sequence"][d].tolist() == raw.encode(text, add_special_tokens=False).ids + [eos]
        assert batch.samples[SENTENCE_LENGTHS][d].sum() == len(batch.samples["sequence"][d])
    assert batch.samples[SENTENCE_LENGTHS].lengths[:2].tolist() == [4, 3]  # the sentences are still there


def test_unknown_splitter_lists_the_choices():
    with pytest.raises(ConfigError, match="blingfire"):
        sentence_splitter("punkt")


def test_only_pt_documents_are_split(trained):
    with pytest.raises(ConfigError, match="processor 'pt'"):
        SentenceProcessor(ProcessorFactory.create("sft", trained))


def test_sentences_decode_to_the_document_and_eos_ends_only_the_last(gpt2):
    rows = [{"text": TEXT}, {"text": "One sentence only"}, {"text": ""}]
    batch = SentenceProcessor(ProcessorFactory.create("pt", gpt2)).process_batch(rows)
    assert [i for i, _ in batch.errors] == [2] and batch.rows.tolist() == [0, 1]
    per_doc = batch.samples[SENTENCE_LENGTHS]
    assert per_doc.lengths.tolist() == [4, 1]
    documents = batch.samples["sequence"]
    np.testing.assert_array_equal(per_doc.values.sum(), documents.values.size)
    eos = gpt2.eos_token_id
    for d, row in enumerate(rows[:2]):
        tokens = documents[d].tolist()
        assert tokens[-1] == eos and tokens.count(eos) == 1
        assert gpt2.decode(tokens[:-1]) == row["text"]


def test_max_length_cuts_documents_at_whole_tokens_and_keeps_sentence_bounds(gpt2):
    processor = ProcessorFactory.create("pt", gpt2, max_length=12, overflow="truncate")
    batch = SentenceProcessor(processor).process_batch([{"text": TEXT}, {"text": "Short. Text."}])
    full = SentenceProcessor(ProcessorFactory.create("pt", gpt2)).process_batch([{"text": TEXT}])
    assert batch.truncated == 1
    eos = gpt2.eos_token_id  # the cut document still ends in eos, as pt's own truncation leaves it
    assert batch.samples["sequence"][0].tolist() == full.samples["sequence"][0][:11].tolist() + [eos]
    first = full.samples[SENTENCE_LENGTHS][0]
    cut = batch.samples[SENTENCE_LENGTHS][0].tolist()
    assert sum(cut) == 12 and cut[:-1] == first[: len(cut) - 1].tolist() and cut[-1] <= first[len(cut) - 1] + 1
    assert sum(batch.samples[SENTENCE_LENGTHS][1]) == len(batch.samples["sequence"][1])
    dropping = ProcessorFactory.create("pt", gpt2, max_length=12)
    assert [e.reason for _, e in SentenceProcessor(dropping).process_batch([{"text": TEXT}]).errors] == ["too_long"]


def test_cache_writes_sentence_items_with_document_offsets(gpt2, llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:25]
    path = tmp_path / "c4.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    options = CacheOptions(split_sentences=True, output_format="both", batch_size=10)
    stats = cache_file(str(path), str(tmp_path / "o"), ProcessorFactory.create("pt", gpt2), options)
    sentences = [t.tolist() for t in load_h5(stats.output_url)["sequence"]]
    with open_h5(stats.output_url) as f:
        documents = f["document_offsets"][...]
        assert bool(f.attrs["split_sentences"]) and f.attrs["sentence_splitter"] == "blingfire"
    assert documents.size == len(rows) + 1 and documents[-1] == len(sentences) == stats.sentences_written
    eos = gpt2.eos_token_id
    for d, row in enumerate(rows):
        doc = sentences[documents[d] : documents[d + 1]]
        assert all(eos not in s for s in doc[:-1]) and doc[-1][-1] == eos
        assert "".join(gpt2.decode(s) for s in doc) == row["text"] + "<|endoftext|>"
    dataset = _megatron_indexed_dataset()(stats.megatron_prefixes["text"])  # Megatron's name for --split-sentences
    assert stats.megatron_prefixes["text"].endswith("_text_sentence")
    assert dataset.document_indices.tolist() == documents.tolist()
    assert [dataset[i].tolist() for i in range(len(dataset))] == sentences
