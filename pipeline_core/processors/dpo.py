"""``dpo``: one prompt, a chosen and a rejected response -> two masked sequences sharing the prompt."""

from __future__ import annotations

import numpy as np

from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory, require_text, split_valid
from pipeline_core.processors.length import over_length
from pipeline_core.processors.sft import cut, masked_concat


@ProcessorFactory.register("dpo")
class DPOProcessor(Processor):
    groups = {"chosen": ("chosen", "chosen_mask"), "rejected": ("rejected", "rejected_mask")}
    default_strategy = "chatml"

    def _extract(self, row: dict) -> tuple[str, str, str]:
        return tuple(self._norm(require_text(row, k)) for k in ("query", "chosen", "rejected"))

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        good, positions, errors = split_valid(rows, self._extract)
        n = len(good)
        ids = self.tokenizer.encode_ragged([g[k] for k in range(3) for g in good])
        prompt = self.strategy.assemble_prompt_batch(ids.slice_rows(0, n))
        chosen, chosen_mask = masked_concat(prompt, self.strategy.assemble_response_batch(ids.slice_rows(n, 2 * n)))
        rejected, rejected_mask = masked_concat(
            prompt, self.strategy.assemble_response_batch(ids.slice_rows(2 * n, 3 * n))
        )
        longest = np.maximum(chosen.lengths, rejected.lengths)
        keep, long_errors, truncated = over_length(longest, prompt.lengths, self.max_length, self.overflow)
        chosen, chosen_mask = cut(chosen, chosen_mask, self.max_length)
        rejected, rejected_mask = cut(rejected, rejected_mask, self.max_length)
        errors += [(int(positions[i]), e) for i, e in long_errors]
        samples = {"chosen": chosen, "chosen_mask": chosen_mask, "rejected": rejected, "rejected_mask": rejected_mask}
        samples = {k: v.keep(keep) for k, v in samples.items()}
        return ProcessedBatch(samples, positions[keep], sorted(errors, key=lambda x: x[0]), truncated)
