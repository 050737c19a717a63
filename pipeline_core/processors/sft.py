"""``sft``: a query and its response -> ``sequence`` with a ``loss_mask`` over the response.

::

    sequence  = prompt_prefix  query  prompt_suffix | response  response_suffix
    loss_mask = False ....................... False | True ............... True
"""

from __future__ import annotations

import numpy as np

from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory, require_text, split_valid
from pipeline_core.processors.length import over_length, truncate
from pipeline_core.ragged import Ragged, concat_ragged, constant_like


def masked_concat(prompt: Ragged, response: Ragged) -> tuple[Ragged, Ragged]:
    """(prompt + response, mask False over the prompt and True over the response)."""
    sequence = concat_ragged([prompt, response])
    mask = concat_ragged([constant_like(prompt, False, np.bool_), constant_like(response, True, np.bool_)])
    return sequence, mask


def cut(sequence: Ragged, mask: Ragged, max_length: int | None) -> tuple[Ragged, Ragged]:
    if max_length is None:
        return sequence, mask
    limit = np.full(len(sequence), max_length)
    return truncate(sequence, limit), truncate(mask, limit)


@ProcessorFactory.register("sft")
class SFTProcessor(Processor):
    groups = {"sequence": ("sequence", "loss_mask")}
    default_strategy = "chatml"

    def __init__(self, tokenizer, strategy=None, query_key: str = "query", response_key: str = "response", **kwargs):
        super().__init__(tokenizer, strategy, **kwargs)
        self.query_key, self.response_key = query_key, response_key

    def _extract(self, row: dict) -> tuple[str, str]:
        query = self._norm(require_text(row, self.query_key))
        return query, self._norm(require_text(row, self.response_key))

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        good, positions, errors = split_valid(rows, self._extract)
        n = len(good)
        ids = self.tokenizer.encode_ragged([g[0] for g in good] + [g[1] for g in good])
        prompt = self.strategy.assemble_prompt_batch(ids.slice_rows(0, n))
        response = self.strategy.assemble_response_batch(ids.slice_rows(n, 2 * n))
        sequence, mask = masked_concat(prompt, response)
        keep, long_errors, truncated = over_length(sequence.lengths, prompt.lengths, self.max_length, self.overflow)
        sequence, mask = cut(sequence, mask, self.max_length)
        errors += [(int(positions[i]), e) for i, e in long_errors]
        samples = {"sequence": sequence.keep(keep), "loss_mask": mask.keep(keep)}
        return ProcessedBatch(samples, positions[keep], sorted(errors, key=lambda x: x[0]), truncated)
