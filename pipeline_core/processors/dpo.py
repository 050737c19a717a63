"""``dpo``: a chosen and a rejected conversation sharing their prompt -> two masked sequences.

Rows are ``{"chosen_messages", "rejected_messages"}`` or ``{"query", "chosen", "rejected"}``
(processors/messages.py). By default only the last assistant turn of each side is trained on
(``train_on="last"``): earlier turns belong to the shared prompt. Per side: ``{side}`` (ids),
``{side}_mask`` (bool) and ``{side}_weight`` (float32, deferred like sft's ``loss_weight``).

Over-length: a pair is as long as its longer side, and its prompt is the longer of the two parts
before the first trained token, so truncation never cuts into either side's prompt; a pair whose
prompt alone reaches max_length is dropped as ``prompt_too_long``. Media references (under
``media="keep"``) must be the same on both sides and are stored once, under ``media``.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import RowError
from pipeline_core.processors import fast_pairs
from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory, assemble, split_valid
from pipeline_core.processors.conversation import (
    Rendered,
    encode_rendered,
    media_cut_error,
    media_within,
    render,
)
from pipeline_core.processors.length import over_length, truncate_all
from pipeline_core.processors.media import media_ragged
from pipeline_core.processors.messages import ConversationReader, check_shared_prompt

SIDES = ("chosen", "rejected")


@ProcessorFactory.register("dpo")
class DPOProcessor(Processor):
    groups = {side: (side, f"{side}_mask", f"{side}_weight") for side in SIDES}
    deferred_keys = ("chosen_weight", "rejected_weight")
    deferred_stand_ins = {f"{side}_weight": f"{side}_mask" for side in SIDES}
    paired = True
    default_strategy = "chatml"

    def __init__(
        self,
        tokenizer,
        strategy=None,
        converter=None,
        train_on: str = "last",
        media: str = "skip",
        train_tool_calls: bool = False,
        **kwargs,
    ):
        super().__init__(tokenizer, strategy, **kwargs)
        self.reader = ConversationReader(converter, train_on, media, train_tool_calls=train_tool_calls)
        self.sample_keys = ("media",) if media == "keep" else ()

    def describe(self) -> dict:
        # "shared_prompt": pairs whose sides differ before their answer are refused (since
        # 2026-12-06): outputs written before, which may hold such pairs, get other cache keys
        return {**super().describe(), **self.reader.describe(), "shared_prompt": "checked"}

    def _extract(self, row: dict) -> tuple[Rendered, Rendered]:
        chosen, rejected = self.reader.pair(row, self.normalizer)
        if chosen.media != rejected.media:
            raise RowError(
                "media_mismatch",
                "chosen_messages and rejected_messages reference different media; a pair shares its prompt's media",
                "rejected_messages",
            )
        # a side that trains nothing is nothing_to_train (said first): its prompt would be all of it
        rendered = render(self.strategy, chosen), render(self.strategy, rejected)
        check_shared_prompt(chosen, rejected)
        return rendered

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        fast = fast_pairs.dpo_batch(self, rows)
        return fast if fast is not None else self._general_batch(rows)

    def _general_batch(self, rows: list[dict]) -> ProcessedBatch:
        good, positions, errors = split_valid(rows, self._extract)
        n = len(good)
        encoded = encode_rendered(self.tokenizer, [g[0] for g in good] + [g[1] for g in good])
        sides = {"chosen": encoded.rows(0, n), "rejected": encoded.rows(n, 2 * n)}
        longest = np.maximum(*(e.sequence.lengths for e in sides.values()))
        prompt = np.maximum(*(e.prompt_lengths for e in sides.values()))
        keep, dropped, truncated = over_length(longest, prompt, self.max_length, self.overflow)
        media, unsure = media_within(
            [g[0] for g in good] + [g[1] for g in good], encoded.piece_lengths, self.max_length
        )
        for i in _media_cut(media, set(unsure), n, keep) if self.sample_keys else []:
            keep[i], truncated = False, truncated - 1
            dropped.append((i, media_cut_error()))
        samples = {}
        for side, e in sides.items():
            samples |= {side: e.sequence, f"{side}_mask": e.mask, f"{side}_weight": e.weight}
        samples = truncate_all(samples, self.max_length)
        if self.sample_keys:
            samples["media"] = media_ragged(media[:n])
        return assemble(samples, positions, errors, sorted(dropped, key=lambda x: x[0]), keep, truncated)


def _media_cut(media: list[list[dict]], unsure: set[int], n: int, keep) -> list[int]:
    """Kept pairs whose one media list cannot hold after the cut: a side where it cannot be told, or
    sides left with different media (both had the prompt's; a cut took some from one side only)."""
    return [i for i in range(n) if keep[i] and (i in unsure or i + n in unsure or media[i] != media[i + n])]
