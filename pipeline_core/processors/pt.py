"""``pt``: pretraining text. ``{"text"}`` -> ``{"sequence"}`` = [bos] + encode(text) + [eos].

``add_eos`` (default True: Megatron's ``--append-eod``) ends every document with the tokenizer's
eos; ``add_bos`` (default False) starts it with its bos. Either needs that role of the tokenizer.
"""

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

    def __init__(
        self,
        tokenizer,
        strategy=None,
        text_key: str = "text",
        add_bos: bool = False,
        add_eos: bool = True,
        **kwargs,
    ) -> None:
        super().__init__(tokenizer, strategy, **kwargs)
        self.text_key, self.add_bos, self.add_eos = text_key, bool(add_bos), bool(add_eos)
        self._bos = _role_ids(tokenizer, "bos", self.add_bos, "add_bos=True prepends bos to every document")
        self._eos = _role_ids(tokenizer, "eos", self.add_eos, "the pt processor appends eos to every document")

    def describe(self) -> dict:
        changed = {"add_bos": self.add_bos, "add_eos": self.add_eos}
        return {**super().describe(), **({} if (self.add_bos, self.add_eos) == (False, True) else changed)}

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        good, positions, errors = split_valid(rows, lambda r: (self._norm(require_text(r, self.text_key)),))
        ids = self.tokenizer.encode_ragged([g[0] for g in good])
        seq = concat_ragged([tile_rows(self._bos, len(ids)), ids, tile_rows(self._eos, len(ids))])
        keep, long_errors, truncated = over_length(seq.lengths, None, self.max_length, self.overflow)
        if truncated:
            seq = truncate(seq, np.full(len(seq), self.max_length))
        errors += [(int(positions[i]), e) for i, e in long_errors]
        errors.sort(key=lambda x: x[0])
        return ProcessedBatch({"sequence": seq.keep(keep)}, positions[keep], errors, truncated)


def _role_ids(tokenizer, role: str, wanted: bool, why: str) -> np.ndarray:
    if not wanted:
        return np.zeros(0, dtype=np.int32)
    if not tokenizer.has_role(role):
        raise ConfigError(f"{why}; load the tokenizer with {role}_token=... (or set add_{role}=False)")
    return np.asarray([getattr(tokenizer, f"{role}_token_id")], dtype=np.int32)
