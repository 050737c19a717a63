"""Sentence-level output for pretraining text, as Megatron's and MindSpeed's ``--split-sentences``.

Each document is cut into sentences by an offline splitter (``blingfire``: a finite-state model
shipped inside its wheel, nothing downloaded at run time). The document is tokenized whole and its
tokens are cut where its sentences end (a token across a sentence end, as Qwen's and Llama-3's
``".\n"``, stays with the sentence before), so its sentences join back to exactly the tokens ``pt``
writes for it unsplit, with any tokenizer. (Tokenizing each sentence on its own, as Megatron does,
gives other tokens at the cuts with those tokenizers, and an extra ``▁`` per sentence with
SentencePiece ones.) The wrapped ``pt`` processor's ``add_bos`` / ``add_eos`` are kept per
document: bos opens only its first sentence, eos closes only its last.

``SentenceProcessor`` wraps a ``pt`` processor and returns per document::

    samples["sequence"]          the document's tokens (all its sentences back to back)
    samples["sentence_lengths"]  its sentences' token counts (int64), summing to the document length

``max_length`` applies to whole documents; ``overflow='truncate'`` cuts them as pt does: the
first tokens and the sentences they reach, the document still ending in eos.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.keys import SENTENCE_LENGTHS, sentence_items  # noqa: F401  (re-exported)
from pipeline_core.formats.ragged import Ragged, concat_ragged, gather_index, offsets_from_lengths
from pipeline_core.processors.base import ProcessedBatch, Processor, normalized_text, split_valid
from pipeline_core.processors.length import over_length, truncate

Splitter = Callable[[str], list[tuple[int, int]]]  # text -> (start, end) character spans of sentences


def _blingfire() -> Splitter:
    try:
        import blingfire
    except ImportError as exc:
        raise ConfigError("split_sentences needs the blingfire package: pip install blingfire") from exc
    return lambda text: blingfire.text_to_sentences_and_offsets(text)[1]


SPLITTERS: dict[str, Callable[[], Splitter]] = {"blingfire": _blingfire}


def sentence_splitter(name: str = "blingfire") -> Splitter:
    if name not in SPLITTERS:
        raise ConfigError(f"unknown sentence splitter {name!r}; choose one of {sorted(SPLITTERS)}")
    return SPLITTERS[name]()


def sentence_ends(text: str, splitter: Splitter) -> list[int]:
    """The character positions where the text's sentences end, but the last."""
    return [end for _, end in splitter(text)[:-1]]


def sentence_lengths(token_starts: np.ndarray, ends: list[int]) -> np.ndarray:
    """A document's tokens per sentence, cut at the first token starting at or after each sentence end
    (``token_starts``: each token's first character); sentences left without a token are merged into
    the next. One sentence of 0 tokens for a document without any."""
    starts = np.maximum.accumulate(token_starts) if token_starts.size else token_starts
    bounds = np.searchsorted(starts, np.asarray(ends, dtype=np.int64), side="left")
    lengths = np.diff(np.concatenate([[0], bounds, [starts.size]]))
    kept = lengths[lengths > 0]
    return kept.astype(np.int64) if kept.size else np.zeros(1, dtype=np.int64)


class SentenceProcessor:
    """A ``pt`` processor whose documents come out as sentences (see the module docstring)."""

    def __init__(self, processor: Processor, splitter: str = "blingfire") -> None:
        if processor.type != "pt":
            raise ConfigError(
                f"split_sentences works on pretraining text; the {processor.type!r} processor's samples "
                "are not documents of sentences: use processor 'pt' or split_sentences=False"
            )
        if len(getattr(processor, "text_keys", ())) > 1:
            raise ConfigError("split_sentences splits one text per row; use one text key (json_keys: [text])")
        self.processor, self.splitter_name = processor, splitter
        self.split = sentence_splitter(splitter)
        self.type, self.groups, self.tokenizer = processor.type, processor.groups, processor.tokenizer
        # the very ids pt wraps a whole document with (empty when add_bos / add_eos is off)
        self._bos, self._eos = processor.document_marks

    @property
    def keys(self) -> list[str]:
        return self.processor.keys

    @property
    def megatron_names(self) -> dict[str, str]:
        """The wrapped pt processor's file names (``sequence`` is its text key)."""
        return getattr(self.processor, "megatron_names", {})

    def describe(self) -> dict:
        # "sentence_cut" since 2026-12-07: cut between the whole document's tokens (each sentence was
        # tokenized on its own: other tokens with Qwen/Llama-3/SentencePiece tokenizers)
        return {**self.processor.describe(), "sentence_splitter": self.splitter_name, "sentence_cut": "document_tokens"}

    def _text(self, row: dict) -> str:
        return normalized_text(row, self.processor.text_key, self.processor.normalizer)

    def _encode(self, texts: list[str]) -> tuple[Ragged, Ragged]:
        """(tokens per document, sentence lengths per document), each document between pt's bos and eos."""
        ids, starts = self.tokenizer.encode_with_starts(texts)
        per_document = [sentence_lengths(starts[d], sentence_ends(text, self.split)) for d, text in enumerate(texts)]
        counts = np.array([len(lengths) for lengths in per_document], dtype=np.int64)
        lengths = np.concatenate(per_document) if per_document else np.zeros(0, dtype=np.int64)
        sentences = _wrap_documents(Ragged(ids.values, offsets_from_lengths(lengths)), counts, self._bos, self._eos)
        documents = Ragged(sentences.values, offsets_from_lengths(_sums(sentences.lengths, counts)))
        return documents, Ragged(sentences.lengths, offsets_from_lengths(counts))

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        pt = self.processor
        good, positions, errors = split_valid(rows, lambda r: (self._text(r),))
        documents, per_doc = self._encode([g[0] for g in good])
        keep, long_errors, truncated = over_length(documents.lengths, None, pt.max_length, pt.overflow)
        if pt.max_length is not None:
            documents, per_doc = _cut(documents, per_doc, pt.max_length, self._eos)
        errors += [(int(positions[i]), e) for i, e in long_errors]
        kept = np.flatnonzero(keep)
        samples = {"sequence": documents.select(kept), SENTENCE_LENGTHS: per_doc.select(kept)}
        return ProcessedBatch(samples, positions[kept], sorted(errors, key=lambda x: x[0]), truncated)


def _wrap_documents(sentences: Ragged, counts: np.ndarray, bos: np.ndarray, eos: np.ndarray) -> Ragged:
    """``bos`` before the first sentence of every document, ``eos`` after its last (either may be empty).

    ``counts``: sentences per document, each at least 1.
    """
    bounds = offsets_from_lengths(counts)
    starts = _marks(sentences, bounds[:-1], bos)
    ends = _marks(sentences, bounds[1:] - 1, eos)
    return concat_ragged([starts, sentences, ends])


def _marks(sentences: Ragged, rows: np.ndarray, tokens: np.ndarray) -> Ragged:
    """``tokens`` as the items of sentences ``rows``, nothing for the others: one row per sentence."""
    lengths = np.zeros(len(sentences), dtype=np.int64)
    lengths[rows] = tokens.size
    values = np.tile(tokens, len(rows)).astype(sentences.values.dtype)
    return Ragged(values, offsets_from_lengths(lengths))


def _sums(values: np.ndarray, counts: np.ndarray) -> np.ndarray:
    """Per group of ``counts`` consecutive values, their sum."""
    ends = np.concatenate([[0], np.cumsum(values, dtype=np.int64)])
    bounds = offsets_from_lengths(counts)
    return ends[bounds[1:]] - ends[bounds[:-1]]


def _cut(documents: Ragged, per_doc: Ragged, limit: int, eos: np.ndarray) -> tuple[Ragged, Ragged]:
    """The documents longer than ``limit`` cut as pt cuts them: to ``limit`` tokens still ending in
    ``eos`` (pt's max_length leaves room for the text), their sentence lengths clipped to match."""
    over = documents.lengths > limit
    limits = np.where(over, limit - eos.size, documents.lengths)
    documents, per_doc = truncate(documents, limits), _clip(per_doc, limits)
    if not eos.size or not over.any():
        return documents, per_doc
    cut = np.flatnonzero(over)
    documents = concat_ragged([documents, _marks(documents, cut, eos)])
    lengths = per_doc.values.copy()
    lengths[per_doc.offsets[cut + 1] - 1] += eos.size  # eos ends the last sentence kept
    return documents, Ragged(lengths, per_doc.offsets)


def _clip(per_doc: Ragged, limits: np.ndarray) -> Ragged:
    """Sentence lengths after cutting document ``d`` at ``limits[d]`` tokens; emptied sentences removed."""
    rank = gather_index(np.zeros(len(per_doc), dtype=np.int64), per_doc.lengths)  # sentence index in its document
    document = np.repeat(np.arange(len(per_doc)), per_doc.lengths)
    ends = np.cumsum(per_doc.values) - np.repeat(_before(per_doc), per_doc.lengths)
    ends = np.minimum(ends, np.repeat(limits, per_doc.lengths))
    starts = np.where(rank > 0, np.concatenate([[0], ends[:-1]]), 0)
    lengths = ends - starts
    kept = lengths > 0
    return Ragged(lengths[kept], offsets_from_lengths(np.bincount(document[kept], minlength=len(per_doc))))


def _before(per_doc: Ragged) -> np.ndarray:
    """Tokens in all earlier documents, per document."""
    return offsets_from_lengths(_sums(per_doc.values, per_doc.lengths))[:-1]
