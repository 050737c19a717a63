"""Sentence-level output: lossless splitting, EOS only at document ends, documents kept."""

from __future__ import annotations

import json

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import CacheOptions, ConfigError, ProcessorFactory, cache_file, load_h5
from pipeline_core.formats.h5 import open_h5
from pipeline_core.processors.sentences import SENTENCE_LENGTHS, SentenceProcessor, sentence_splitter, split_sentences
from tests.conftest import load_json_or_jsonl
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset

TEXT = "Dr. Smith went to Washington. He arrived at 5 p.m. on Jan. 3rd!  Was it fun?\nYes."


def test_split_is_lossless_and_puts_whitespace_before_the_next_sentence():
    pieces = split_sentences(TEXT, sentence_splitter())
    assert "".join(pieces) == TEXT
    assert pieces == ["Dr. Smith went to Washington.", " He arrived at 5 p.m. on Jan. 3rd!", "  Was it fun?", "\nYes."]


@settings(max_examples=100, deadline=None)
@given(st.text(min_size=1, max_size=200))
def test_split_joins_back_to_any_text(text):
    assert "".join(split_sentences(text, sentence_splitter())) == text


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
    assert batch.samples["sequence"][0].tolist() == full.samples["sequence"][0][:12].tolist()
    first = full.samples[SENTENCE_LENGTHS][0]
    cut = batch.samples[SENTENCE_LENGTHS][0].tolist()
    assert sum(cut) == 12 and cut[:-1] == first[: len(cut) - 1].tolist() and cut[-1] <= first[len(cut) - 1]
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
