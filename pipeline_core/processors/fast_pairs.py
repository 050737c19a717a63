"""The vectorised path for flat rows: ``{"query", "response"}`` (sft) and ``{"query", "chosen",
"rejected"}`` (dpo) with a ChatML or Alpaca strategy.

Such a row is one user turn and one assistant turn, so its sample is always::

    prompt_prefix  query  prompt_suffix | response  response_suffix
    weight 0 ............................ | 1 ........................

Building it needs no per-row rendering: every text of the batch is encoded in one call and the
format tokens are tiled with numpy. The result is identical to the general conversation path
(the tests compare both); a batch holding any other kind of row, a row the fast check rejects,
or a converter goes the general way.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import RowError
from pipeline_core.processors.base import ProcessedBatch, assemble, require_text
from pipeline_core.processors.length import over_length, truncate_all
from pipeline_core.processors.media import media_ragged
from pipeline_core.ragged import Ragged, concat_ragged, constant_like
from pipeline_core.strategies import AlpacaStrategy, ChatMLStrategy

CONVERSATION_KEYS = ("messages", "chosen_messages", "rejected_messages")


def eligible(processor) -> bool:
    """The built-in turn strategies only: their flat rows are exactly prefix/suffix runs."""
    return processor.reader.converter is None and type(processor.strategy) in (ChatMLStrategy, AlpacaStrategy)


def flat_texts(processor, rows: list, keys: tuple[str, ...]) -> list[tuple[str, ...]] | None:
    """Each row's normalised texts, or None when any row needs the general path."""
    out = []
    try:
        for row in rows:
            if not isinstance(row, dict) or any(k in row for k in CONVERSATION_KEYS):
                return None
            out.append(tuple(processor._norm(require_text(row, k)) for k in keys))
    except RowError:
        return None
    return out


def _side(prompt: Ragged, response: Ragged, strategy) -> tuple[Ragged, Ragged, Ragged]:
    answer = strategy.assemble_response_batch(response)
    sequence = concat_ragged([prompt, answer])
    weight = concat_ragged([constant_like(prompt, 0.0, np.float32), constant_like(answer, 1.0, np.float32)])
    return sequence, Ragged(weight.values > 0, weight.offsets), weight


def _media(processor, n: int) -> dict:
    return {"media": media_ragged([[] for _ in range(n)])} if processor.sample_keys else {}


def sft_batch(processor, rows: list) -> ProcessedBatch | None:
    texts = flat_texts(processor, rows, (processor.query_key, processor.response_key)) if eligible(processor) else None
    if texts is None:
        return None
    n = len(texts)
    ids = processor.tokenizer.encode_ragged([t[0] for t in texts] + [t[1] for t in texts])
    prompt = processor.strategy.assemble_prompt_batch(ids.slice_rows(0, n))
    sequence, mask, weight = _side(prompt, ids.slice_rows(n, 2 * n), processor.strategy)
    keep, dropped, truncated = over_length(sequence.lengths, prompt.lengths, processor.max_length, processor.overflow)
    samples = truncate_all({"sequence": sequence, "loss_mask": mask, "loss_weight": weight}, processor.max_length)
    return assemble({**samples, **_media(processor, n)}, np.arange(n), [], dropped, keep, truncated)


def dpo_batch(processor, rows: list) -> ProcessedBatch | None:
    texts = (
        flat_texts(processor, rows, (processor.reader.query_key, "chosen", "rejected")) if eligible(processor) else None
    )
    if texts is None:
        return None
    n = len(texts)
    ids = processor.tokenizer.encode_ragged([t[k] for k in range(3) for t in texts])
    prompt = processor.strategy.assemble_prompt_batch(ids.slice_rows(0, n))
    samples = {}
    for k, side in ((1, "chosen"), (2, "rejected")):
        sequence, mask, weight = _side(prompt, ids.slice_rows(k * n, (k + 1) * n), processor.strategy)
        samples |= {side: sequence, f"{side}_mask": mask, f"{side}_weight": weight}
    longest = np.maximum(samples["chosen"].lengths, samples["rejected"].lengths)
    keep, dropped, truncated = over_length(longest, prompt.lengths, processor.max_length, processor.overflow)
    samples = truncate_all(samples, processor.max_length)
    return assemble({**samples, **_media(processor, n)}, np.arange(n), [], dropped, keep, truncated)
