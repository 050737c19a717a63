"""``pt``: pretraining text. ``{"text"}`` -> ``{"sequence"}`` = [bos] + encode(text) + [eos].

``add_eos`` (default True: Megatron's ``--append-eod``) ends every document with the tokenizer's
eos; ``add_bos`` (default False) starts it with its bos. Either needs that role of the tokenizer.

``text_key`` names the field (default ``text``); its Megatron files are named after it, as
Megatron's ``--json-keys`` does (``{stem}_text_document``). ``text_keys=[a, b]`` tokenizes several
fields of every row, each its own key and Megatron dataset (``{stem}_a_document``,
``{stem}_b_document``); a row missing one of them is an error for the whole row, so every dataset
keeps one document per row, aligned. ``max_length`` applies to each key.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.ragged import Ragged, wrap_rows
from pipeline_core.processors.base import (
    ProcessedBatch,
    Processor,
    ProcessorFactory,
    is_blank,
    normalized_text,
    plain_texts,
    split_valid,
)
from pipeline_core.processors.length import over_length, truncate


@ProcessorFactory.register("pt")
class PretrainProcessor(Processor):
    groups = {"sequence": ("sequence",)}
    default_strategy = None
    concurrent_batches = True  # no state between batches; the tokenizer's backend allows overlapping calls

    def __init__(
        self,
        tokenizer,
        strategy=None,
        text_key: str = "text",
        text_keys: list[str] | None = None,
        add_bos: bool = False,
        add_eos: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(tokenizer, strategy, **kwargs)
        keys = list(text_keys or [text_key])
        if not keys or len(set(keys)) != len(keys) or not all(isinstance(k, str) and k for k in keys):
            raise ConfigError(f"text_keys must be distinct field names, got {text_keys!r}")
        self.text_key, self.text_keys = keys[0], keys
        if len(keys) > 1:  # one group per field, named after it
            self.groups = {k: (k,) for k in keys}
        self.megatron_names = {"sequence": keys[0]} if len(keys) == 1 else {}
        self.add_bos, self.add_eos = bool(add_bos), bool(add_eos)
        self._bos = _role_ids(tokenizer, "bos", self.add_bos, "add_bos=True prepends bos to every document")
        self._eos = _role_ids(tokenizer, "eos", self.add_eos, "the pt processor appends eos to every document")
        marks = self._bos.size + self._eos.size
        if self.max_length is not None and self.max_length <= marks:
            raise ConfigError(
                f"max_length {self.max_length} leaves no token for the text beside bos/eos; raise max_length"
            )

    @property
    def document_marks(self) -> tuple[np.ndarray, np.ndarray]:
        """(ids before, ids after) every document: bos and eos where asked for, else empty."""
        return self._bos, self._eos

    def describe(self) -> dict:
        """The base settings, plus ``text_keys`` when there are several and bos/eos when not the defaults."""
        extra = {"text_keys": self.text_keys} if len(self.text_keys) > 1 else {}
        if (self.add_bos, self.add_eos) != (False, True):
            extra |= {"add_bos": self.add_bos, "add_eos": self.add_eos}
        if self.overflow == "truncate":  # outputs cut before this rule lost their eos: other keys
            extra |= {"truncation": "keeps_bos_eos"}
        return {**super().describe(), **extra}

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        if len(self.text_keys) > 1:
            return self._several_keys(rows)
        texts, positions, errors = self._texts(rows)
        ids = self.tokenizer.encode_ragged(texts)
        seq = wrap_rows(ids, self._bos, self._eos)
        keep, long_errors, truncated = over_length(seq.lengths, None, self.max_length, self.overflow)
        if truncated:
            seq = self._cut(ids)
        errors += [(int(positions[i]), e) for i, e in long_errors]
        errors.sort(key=lambda x: x[0])
        return ProcessedBatch({"sequence": seq.keep(keep)}, positions[keep], errors, truncated)

    def _texts(self, rows: list[dict]) -> tuple[list[str], np.ndarray, list]:
        """(normalized texts of the good rows, their positions, errors of the others)."""
        texts = plain_texts(rows, self.text_key)
        if texts is None:
            return self._texts_row_by_row(rows)
        if self.normalizer is not None:
            texts = list(map(self.normalizer, texts))
            if any(map(is_blank, texts)):  # some normalized to nothing: their reasons
                return self._texts_row_by_row(rows)
        return texts, np.arange(len(texts), dtype=np.int64), []

    def _texts_row_by_row(self, rows: list[dict]) -> tuple[list[str], np.ndarray, list]:
        good, positions, errors = split_valid(rows, lambda r: (normalized_text(r, self.text_key, self.normalizer),))
        return [g[0] for g in good], positions, errors

    def _cut(self, ids: Ragged) -> Ragged:
        """The documents of ``ids`` in at most ``max_length`` tokens, keeping their bos and eos: the
        text is cut, as ``tokenizers``' truncation keeps the tokens its post-processor adds. A cut
        document still ends in eos (Megatron's eod), so in Megatron's stream of documents it never
        runs into the next one."""
        text = truncate(ids, np.full(len(ids), self.max_length - self._bos.size - self._eos.size))
        return wrap_rows(text, self._bos, self._eos)

    def _several_keys(self, rows: list[dict]) -> ProcessedBatch:
        fields = lambda r: tuple(normalized_text(r, k, self.normalizer) for k in self.text_keys)  # noqa: E731
        good, positions, errors = split_valid(rows, fields)
        ids = {key: self.tokenizer.encode_ragged([g[j] for g in good]) for j, key in enumerate(self.text_keys)}
        seqs = {key: wrap_rows(i, self._bos, self._eos) for key, i in ids.items()}
        longest = np.maximum.reduce([s.lengths for s in seqs.values()]) if good else np.zeros(0, dtype=np.int64)
        keep, long_errors, truncated = over_length(longest, None, self.max_length, self.overflow)
        if truncated:
            seqs = {k: self._cut(i) for k, i in ids.items()}
        errors += [(int(positions[i]), e) for i, e in long_errors]
        errors.sort(key=lambda x: x[0])
        return ProcessedBatch({k: s.keep(keep) for k, s in seqs.items()}, positions[keep], errors, truncated)


def _role_ids(tokenizer, role: str, wanted: bool, why: str) -> np.ndarray:
    if not wanted:
        return np.zeros(0, dtype=np.int32)
    if not tokenizer.has_role(role):
        raise ConfigError(f"{why}; load the tokenizer with {role}_token=... (or set add_{role}=False)")
    return np.asarray([getattr(tokenizer, f"{role}_token_id")], dtype=np.int32)
