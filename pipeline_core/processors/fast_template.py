"""The vectorised path for flat sft rows (``{"query", "response"}``) with the template strategy.

The strategy answers a batch of such rows at once (chat/template_pairs.py): ids back to back and
each row's trained tokens. The sample is then laid out with numpy, as fast_pairs does for chatml::

    sequence  the template's render of [user: query, assistant: response]
    weight    0 ... before the assistant turn | 1 over its span | 0 after (what the template writes next)

The result is identical to the general conversation path (the tests compare both). Rows that are
not flat are handled as in fast_pairs: a batch keeps this path only when each such row fails the
general path too, with its error; otherwise, or when the strategy cannot answer the pairs, the
batch goes the general way.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.chat.template import TemplateStrategy
from pipeline_core.chat.template_pairs import pair_batch
from pipeline_core.formats.ragged import Ragged
from pipeline_core.processors import fast_pairs
from pipeline_core.processors.base import ProcessedBatch

STEPS = np.array([0.0, 1.0, 0.0], dtype=np.float32)  # before the span, the span, after it


def eligible(processor) -> bool:
    strategy = processor.strategy
    if processor.reader.converter is not None or not isinstance(strategy, TemplateStrategy):
        return False
    return strategy.trained_roles == {"assistant"}


def sft_batch(processor, rows: list) -> ProcessedBatch | None:
    keys = (processor.query_key, processor.response_key)
    flat = fast_pairs.flat_rows(processor, rows, keys) if eligible(processor) else None
    found = None if flat is None else pair_batch(processor.strategy, flat.texts)
    if found is None:
        return None
    kept = fast_pairs.FlatRows(
        [flat.texts[i] for i in found.kept.tolist()],
        flat.positions[found.kept],
        flat.errors + [(int(flat.positions[i]), e) for i, e in found.errors],
    )
    sequence = found.sequence
    weight = Ragged(_weights(found.spans, sequence.lengths), sequence.offsets)
    samples = {"sequence": sequence, "loss_mask": Ragged(weight.values > 0, sequence.offsets), "loss_weight": weight}
    return fast_pairs.finish(processor, kept, samples, sequence.lengths, found.spans[:, 0])


def _weights(spans: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """1.0 over each row's span, 0.0 elsewhere (float32, all rows back to back)."""
    runs = np.stack([spans[:, 0], spans[:, 1] - spans[:, 0], lengths - spans[:, 1]], axis=1)
    return np.repeat(np.tile(STEPS, len(lengths)), runs.ravel())
