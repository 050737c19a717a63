"""split_sentences keeps the pt processor's add_bos / add_eos: a document's sentences carry exactly
the bos and eos the unsplit document would (bos opening its first sentence, eos closing its last).

Expectations are built without the project: sentences from blingfire itself, ids from the
``tokenizers`` library, bos/eos placed by hand.
"""

from __future__ import annotations

import json

import blingfire
import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline_core import AutoTokenizer, CacheOptions, ConfigError, ProcessorFactory, cache_file, load_h5
from pipeline_core.formats.h5 import open_h5
from pipeline_core.processors.sentences import SENTENCE_LENGTHS, SentenceProcessor
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset

END = "<|endoftext|>"
DOCS = [
    "The cat sat on the mat. Then it slept for a while.  Nobody woke it up!",
    "A single sentence without a full stop",
    "Is this the third one? Yes.\nIt has a line break too.",
    "Short. Text. Here.",
]
FLAG_COMBINATIONS = [(False, True), (True, True), (False, False), (True, False)]


@pytest.fixture(scope="module")
def reference(gpt2_path) -> Tokenizer:
    return Tokenizer.from_file(str(gpt2_path))


def _blingfire_pieces(text: str) -> list[str]:
    """The documented lossless cut: each sentence ends where blingfire ends it, and the gap up to
    the next one goes to the start of that next one."""
    spans = blingfire.text_to_sentences_and_offsets(text)[1]
    pieces, start = [], 0
    for _, end in spans[:-1]:
        if end > start:
            pieces.append(text[start:end])
            start = end
    pieces.append(text[start:])
    return pieces


def _expected(reference: Tokenizer, text: str, bos: int | None, eos: int | None) -> list[list[int]]:
    """Token ids of ``text``'s sentences with ``bos`` before the first and ``eos`` after the last."""
    sentences = [reference.encode(p, add_special_tokens=False).ids for p in _blingfire_pieces(text)]
    if bos is not None:
        sentences[0] = [bos, *sentences[0]]
    if eos is not None:
        sentences[-1] = [*sentences[-1], eos]
    return sentences


def _write_jsonl(tmp_path, texts: list[str]) -> str:
    path = tmp_path / "docs.jsonl"
    path.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
    return str(path)


def _cache(tmp_path, tokenizer, out: str, split: bool, **pt_settings):
    processor = ProcessorFactory.create("pt", tokenizer, **pt_settings)
    options = CacheOptions(split_sentences=split, output_format="both", batch_size=2)
    return cache_file(_write_jsonl(tmp_path, DOCS), str(tmp_path / out), processor, options)


def _h5_documents(url: str) -> tuple[list[list[list[int]]], dict]:
    """(documents as lists of sentences, the file's attributes)."""
    sentences = [s.tolist() for s in load_h5(url)["sequence"]]
    with open_h5(url) as f:
        bounds = f["document_offsets"][...].tolist()
        attrs = dict(f.attrs)
    return [sentences[a:b] for a, b in zip(bounds[:-1], bounds[1:])], attrs


def _megatron_documents(prefix: str) -> list[list[list[int]]]:
    dataset = _megatron_indexed_dataset()(prefix)
    bounds = dataset.document_indices.tolist()
    return [[dataset[i].tolist() for i in range(a, b)] for a, b in zip(bounds[:-1], bounds[1:])]


def _assert_attrs_describe(attrs: dict, documents: list[list[list[int]]], add_bos: bool, add_eos: bool) -> None:
    """The attributes name the settings used, and every document holds what they claim."""
    claims_bos, claims_eos = bool(attrs.get("add_bos", False)), bool(attrs.get("add_eos", True))
    assert (claims_bos, claims_eos) == (add_bos, add_eos)
    flat = [[t for s in doc for t in s] for doc in documents]
    assert all((d[0] == attrs["bos_id"]) == claims_bos for d in flat)
    assert all((d[-1] == attrs["eos_id"]) == claims_eos for d in flat)
    assert attrs["tokens_written"] == sum(len(d) for d in flat)
    assert attrs["sentences_written"] == sum(len(doc) for doc in documents)


@pytest.mark.parametrize(("add_bos", "add_eos"), FLAG_COMBINATIONS)
def test_sentence_files_hold_the_bos_and_eos_asked_for(tmp_path, reference, add_bos, add_eos, gpt2_path):
    tokenizer = AutoTokenizer.from_file(gpt2_path, eos_token=END, bos_token=END)
    stats = _cache(tmp_path, tokenizer, "split", True, add_bos=add_bos, add_eos=add_eos)
    end = reference.token_to_id(END)
    expected = [_expected(reference, t, end if add_bos else None, end if add_eos else None) for t in DOCS]
    documents, attrs = _h5_documents(stats.output_url)
    assert documents == expected
    assert _megatron_documents(stats.megatron_prefixes["text"]) == expected
    _assert_attrs_describe(attrs, documents, add_bos, add_eos)


@pytest.mark.parametrize(("add_bos", "add_eos"), FLAG_COMBINATIONS)
def test_joined_sentences_equal_the_unsplit_documents(tmp_path, add_bos, add_eos, gpt2_path):
    tokenizer = AutoTokenizer.from_file(gpt2_path, eos_token=END, bos_token=END)
    split = _cache(tmp_path, tokenizer, "split", True, add_bos=add_bos, add_eos=add_eos)
    whole = _cache(tmp_path, tokenizer, "whole", False, add_bos=add_bos, add_eos=add_eos)
    documents, _ = _h5_documents(split.output_url)
    joined = [[t for s in doc for t in s] for doc in documents]
    assert joined == [d.tolist() for d in load_h5(whole.output_url)["sequence"]]


def test_a_bos_distinct_from_eos_opens_only_the_first_sentence(tmp_path, reference, gpt2_path):
    """With bos and eos different ids, each lands at its own end of the document and nowhere else."""
    bos_token = "Ġgazed"
    bos = reference.token_to_id(bos_token)
    assert all(bos not in reference.encode(t, add_special_tokens=False).ids for t in DOCS)
    tokenizer = AutoTokenizer.from_file(gpt2_path, eos_token=END, bos_token=bos_token)
    stats = _cache(tmp_path, tokenizer, "split", True, add_bos=True, add_eos=True)
    documents, attrs = _h5_documents(stats.output_url)
    assert documents == [_expected(reference, t, bos, reference.token_to_id(END)) for t in DOCS]
    _assert_attrs_describe(attrs, documents, True, True)


def test_no_eos_role_is_needed_when_add_eos_is_false(tmp_path, reference, gpt2_path):
    tokenizer = AutoTokenizer.from_file(gpt2_path, bos_token=END)
    stats = _cache(tmp_path, tokenizer, "split", True, add_bos=True, add_eos=False)
    documents, _ = _h5_documents(stats.output_url)
    assert documents == [_expected(reference, t, reference.token_to_id(END), None) for t in DOCS]


def test_add_bos_without_a_bos_role_is_refused_with_the_fix(gpt2_path):
    tokenizer = AutoTokenizer.from_file(gpt2_path, eos_token=END)
    with pytest.raises(ConfigError, match="bos_token="):
        SentenceProcessor(ProcessorFactory.create("pt", tokenizer, add_bos=True))


@pytest.mark.parametrize(("add_bos", "add_eos"), FLAG_COMBINATIONS)
def test_truncation_cuts_the_same_tokens_as_the_unsplit_document(add_bos, add_eos, gpt2_path):
    tokenizer = AutoTokenizer.from_file(gpt2_path, eos_token=END, bos_token=END)
    settings = {"add_bos": add_bos, "add_eos": add_eos, "max_length": 7, "overflow": "truncate"}
    rows = [{"text": t} for t in DOCS]
    split = SentenceProcessor(ProcessorFactory.create("pt", tokenizer, **settings)).process_batch(rows)
    whole = ProcessorFactory.create("pt", tokenizer, **settings).process_batch(rows)
    assert split.truncated == whole.truncated > 0
    assert split.samples["sequence"].to_lists() == whole.samples["sequence"].to_lists()
    per_doc = split.samples[SENTENCE_LENGTHS]
    np.testing.assert_array_equal([sum(s) for s in per_doc.to_lists()], split.samples["sequence"].lengths)
    assert all(min(s) > 0 for s in per_doc.to_lists())
