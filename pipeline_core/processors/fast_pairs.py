"""The vectorised path for flat rows: ``{"query", "response"}`` (sft) and ``{"query", "chosen",
"rejected"}`` (dpo) with a ChatML or Alpaca strategy.

Such a row is one user turn and one assistant turn, so its sample is always::

    prompt_prefix  query  prompt_suffix | response  response_suffix
    weight 0 ............................ | 1 ........................

Building it needs no per-row rendering: every text of the batch is encoded in one call (a dpo
pair's query once, for both sides) and the format tokens are laid out with numpy. The result is
identical to the general conversation path (the tests compare both). A row whose texts are
missing or empty is reported with the general path's own error and the batch stays on the fast
path; a batch holding any other kind of row, or a converter, goes the general way.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_core.chat.strategies import AlpacaStrategy, ChatMLStrategy
from pipeline_core.errors import RowError
from pipeline_core.formats.ragged import Ragged, concat_ragged, tile_rows
from pipeline_core.processors.base import ProcessedBatch, assemble, normalized_text
from pipeline_core.processors.length import over_length, truncate_all
from pipeline_core.processors.media import media_ragged
from pipeline_core.processors.messages import flat_extras

CONVERSATION_KEYS = ("messages", "chosen_messages", "rejected_messages")
STEP = np.array([0.0, 1.0], dtype=np.float32)  # a sample's weight: 0 over its prompt, then 1


@dataclass(frozen=True, slots=True)
class FlatRows:
    texts: list[tuple[str, ...]]  # per flat row, its normalised texts in key order
    positions: np.ndarray  # int64, the flat rows' positions in the batch
    errors: list[tuple[int, RowError]]  # the other rows, with the general path's error


def eligible(processor) -> bool:
    """The built-in turn strategies only: their flat rows are exactly prefix/suffix runs."""
    strategy = processor.strategy
    if processor.reader.converter is not None or strategy.trained_roles != {"assistant"}:
        return False
    return type(strategy) in (ChatMLStrategy, AlpacaStrategy)


def flat_rows(processor, rows: list, keys: tuple[str, ...]) -> FlatRows | None:
    """The flat rows' texts and the bad rows' errors, or None when a good row needs the general path."""
    texts, positions, errors = [], [], []
    for i, row in enumerate(rows):
        found = _flat_texts(processor, row, keys)
        if found is not None:
            texts.append(found)
            positions.append(i)
            continue
        try:  # not flat: only a row the general path rejects too stays on this path
            processor._extract(row)
        except RowError as e:
            errors.append((i, e))
            continue
        return None
    return FlatRows(texts, np.asarray(positions, dtype=np.int64), errors)


def _flat_texts(processor, row, keys: tuple[str, ...]) -> tuple[str, ...] | None:
    if not isinstance(row, dict) or any(k in row for k in CONVERSATION_KEYS) or flat_extras(row):
        return None
    try:
        return tuple(normalized_text(row, k, processor.normalizer) for k in keys)
    except RowError:
        return None


def _encode_columns(tokenizer, texts: list[tuple[str, ...]], width: int) -> list[Ragged]:
    """One encode call for the whole batch; column k holds every row's k-th text."""
    n = len(texts)
    ids = tokenizer.encode_ragged([t[k] for k in range(width) for t in texts])
    return [ids.slice_rows(k * n, (k + 1) * n) for k in range(width)]


def _side(query: Ragged, response: Ragged, strategy) -> tuple[Ragged, Ragged, Ragged]:
    """(sequence, mask, weight) of ``prefix query suffix | response response_suffix``."""
    n = len(query)
    parts = [strategy.prompt_prefix, query, strategy.prompt_suffix, response, strategy.response_suffix]
    sequence = concat_ragged([p if isinstance(p, Ragged) else tile_rows(p, n) for p in parts])
    runs = np.stack([_prompt_lengths(query, strategy), response.lengths + len(strategy.response_suffix)], axis=1)
    weight = np.repeat(np.tile(STEP, n), runs.ravel())
    return sequence, Ragged(weight > 0, sequence.offsets), Ragged(weight, sequence.offsets)


def _prompt_lengths(query: Ragged, strategy) -> np.ndarray:
    return query.lengths + (len(strategy.prompt_prefix) + len(strategy.prompt_suffix))


def finish(processor, flat: FlatRows, samples: dict, longest: np.ndarray, prompt: np.ndarray) -> ProcessedBatch:
    keep, dropped, truncated = over_length(longest, prompt, processor.max_length, processor.overflow)
    samples = truncate_all(samples, processor.max_length)
    if processor.sample_keys:
        samples["media"] = media_ragged([[] for _ in flat.texts])
    return assemble(samples, flat.positions, flat.errors, dropped, keep, truncated)


def sft_batch(processor, rows: list) -> ProcessedBatch | None:
    flat = flat_rows(processor, rows, (processor.query_key, processor.response_key)) if eligible(processor) else None
    if flat is None:
        return None
    query, response = _encode_columns(processor.tokenizer, flat.texts, 2)
    sequence, mask, weight = _side(query, response, processor.strategy)
    samples = {"sequence": sequence, "loss_mask": mask, "loss_weight": weight}
    return finish(processor, flat, samples, sequence.lengths, _prompt_lengths(query, processor.strategy))


def dpo_batch(processor, rows: list) -> ProcessedBatch | None:
    keys = (processor.reader.query_key, "chosen", "rejected")
    flat = flat_rows(processor, rows, keys) if eligible(processor) else None
    if flat is None:
        return None
    query, *answers = _encode_columns(processor.tokenizer, flat.texts, 3)
    samples = {}
    for side, answer in zip(("chosen", "rejected"), answers):
        sequence, mask, weight = _side(query, answer, processor.strategy)
        samples |= {side: sequence, f"{side}_mask": mask, f"{side}_weight": weight}
    longest = np.maximum(samples["chosen"].lengths, samples["rejected"].lengths)
    return finish(processor, flat, samples, longest, _prompt_lengths(query, processor.strategy))
