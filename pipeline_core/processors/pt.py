"""``pt``: pretraining text. ``{"text"}`` -> ``{"sequence"}`` = encode(text) + [eos]."""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.ragged import concat_ragged, tile_rows
from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory, require_text, split_valid
from pipeline_core.processors.length import over_length, truncate


@ProcessorFactory.register("pt")
class PretrainProcessor(Processor):
    groups = {"sequence": ("sequence",)}
    default_strategy = None

    def __init__(self, tokenizer, strategy=None, text_key: str = "text", **kwargs) -> None:
        super().__init__(tokenizer, strategy, **kwargs)
        if not tokenizer.has_role("eos"):
            raise ConfigError("the pt processor appends eos to every document; load the tokenizer with eos_token=...")
        self.text_key = text_key
        self._eos = np.asarray([tokenizer.eos_token_id], dtype=np.int32)

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        good, positions, errors = split_valid(rows, lambda r: (self._norm(require_text(r, self.text_key)),))
        ids = self.tokenizer.encode_ragged([g[0] for g in good])
        seq = concat_ragged([ids, tile_rows(self._eos, len(ids))])
        keep, long_errors, truncated = over_length(seq.lengths, None, self.max_length, self.overflow)
        if truncated:
            seq = truncate(seq, np.full(len(seq), self.max_length))
        errors += [(int(positions[i]), e) for i, e in long_errors]
        errors.sort(key=lambda x: x[0])
        return ProcessedBatch({"sequence": seq.keep(keep)}, positions[keep], errors, truncated)
