"""``sft``: a conversation (or a query and its response) -> ``sequence`` with a loss mask and weights.

::

    sequence     system, user, tool turns and format tokens | assistant text + end tokens | ...
    loss_mask    False ...................................... | True ...................... | ...
    loss_weight  0 .......................................... | the message's loss_weight .. | ...

Rows are ``{"messages": [...]}`` or ``{"query", "response"}`` (processors/messages.py); the
strategy renders them (strategies.py). ``train_on="all"`` trains on every assistant turn with
loss_weight > 0, ``"last"`` on the last one; ``train_tool_calls=False`` masks out assistant turns
that only call tools; ``converter=`` converts raw rows first. ``loss_weight`` (float32) is always
produced and is a deferred key: it says more than ``loss_mask`` only when a weight is not 0/1.
``train_on_prompt`` and ``train_on_eos`` are the mask controls of mask.py. With ``media="keep"`` the media references are stored per sample under ``media`` (media.py).
"""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import RowError
from pipeline_core.processors import fast_pairs, fast_template
from pipeline_core.processors.base import ProcessedBatch, Processor, ProcessorFactory, assemble, split_valid
from pipeline_core.processors.conversation import (
    Encoded,
    Rendered,
    encode_rendered,
    media_cut_error,
    media_within,
    weighted_samples,
)
from pipeline_core.processors.length import over_length, truncate_all
from pipeline_core.processors.mask import EndTokens, MaskControls, controlled, end_of_turn_ids
from pipeline_core.processors.media import media_ragged
from pipeline_core.processors.messages import Conversation, ConversationReader
from pipeline_core.processors.turns import name_turns, turn_numbers


@ProcessorFactory.register("sft")
class SFTProcessor(Processor):
    groups = {"sequence": ("sequence", "loss_mask", "loss_weight")}
    deferred_keys = ("loss_weight",)
    deferred_stand_ins = {"loss_weight": "loss_mask"}
    default_strategy = "chatml"

    def __init__(
        self,
        tokenizer,
        strategy=None,
        query_key: str = "query",
        response_key: str = "response",
        converter=None,
        train_on: str = "all",
        media: str = "skip",
        train_tool_calls: bool = False,
        train_on_prompt: bool = False,
        train_on_eos: str = "turn",
        train_roles=None,
        **kwargs,
    ):
        super().__init__(tokenizer, strategy, **kwargs)
        self.controls = MaskControls(bool(train_on_prompt), train_on_eos)
        self.query_key, self.response_key = query_key, response_key
        self.reader = ConversationReader(converter, train_on, media, query_key, train_tool_calls, train_roles)
        if self.strategy is not None:
            self.strategy = self.strategy.training_roles(self.reader.train_roles)
        self._ends = None
        if self.strategy is not None and self.controls.trims_ends:
            self._ends = EndTokens(end_of_turn_ids(self.strategy, tokenizer), tokenizer.decode)
        self.sample_keys = ("media",) if media == "keep" else ()

    def describe(self) -> dict:
        ends = self._ends.special if self._ends is not None else ()
        controls = {} if self.controls.default else self.controls.describe(ends)  # older outputs' keys unchanged
        return {**super().describe(), **self.reader.describe(), **controls}

    def _conversation(self, row: dict) -> Conversation:
        return self.reader.sft(row, self.response_key, self.normalizer)

    def _extract(self, row: dict) -> list[Rendered]:
        """One row's samples (fast_pairs checks with it that a row fails the general path too)."""
        conversation = self._conversation(row)
        samples = self.strategy.render_samples(conversation.messages)
        return weighted_samples(samples, conversation, self.controls.prompt_weight)

    def _render(self, rows: list[dict]) -> tuple[list[list[Rendered]], np.ndarray, list]:
        """Each good row's samples (one, or one per turn: the template strategy's ``rewritten="per_turn"``),
        their positions and the bad rows' errors; the strategy renders the batch at once."""
        conversations, positions, errors = split_valid(rows, self._conversation)
        rendered = self.strategy.render_samples_batch([c.messages for c in conversations])
        good, kept = [], []
        for position, conversation, samples in zip(positions.tolist(), conversations, rendered):
            try:
                if isinstance(samples, RowError):
                    raise samples
                good.append(weighted_samples(samples, conversation, self.controls.prompt_weight))
                kept.append(position)
            except RowError as e:
                errors.append((position, e))
        return good, np.asarray(kept, dtype=np.int64), errors

    def process_batch(self, rows: list[dict]) -> ProcessedBatch:
        if not self.controls.default:
            return self._general_batch(rows)
        fast = fast_pairs.sft_batch(self, rows)
        fast = fast if fast is not None else fast_template.sft_batch(self, rows)
        return fast if fast is not None else self._general_batch(rows)

    def _general_batch(self, rows: list[dict]) -> ProcessedBatch:
        good, positions, errors = self._render(rows)
        rendered = [r for samples in good for r in samples]
        per_row = np.asarray([len(samples) for samples in good], dtype=np.int64)
        positions = np.repeat(positions, per_row)
        encoded = encode_rendered(self.tokenizer, rendered)
        failed: list = []
        if self.controls.trims_ends:
            weight, failed = controlled(self.controls, encoded.sequence, encoded.weight, self._ends)
            encoded = Encoded(encoded.sequence, weight, encoded.target, encoded.piece_lengths)
        # a sample the mask controls refused gets that one error (the first found): never also too_long
        lengths = _without(encoded.sequence.lengths, [i for i, _ in failed])
        keep, dropped, truncated = over_length(lengths, encoded.prompt_lengths, self.max_length, self.overflow)
        keep[[i for i, _ in failed]] = False
        media, unsure = media_within(rendered, encoded.piece_lengths, self.max_length)
        for i in [i for i in unsure if keep[i]] if self.sample_keys else []:  # cut, media undecidable
            keep[i], truncated = False, truncated - 1
            dropped.append((i, media_cut_error()))
        turns = turn_numbers(per_row)
        dropped = name_turns(sorted(failed + dropped, key=lambda x: x[0]), turns)
        samples = {"sequence": encoded.sequence, "loss_mask": encoded.mask, "loss_weight": encoded.weight}
        samples = truncate_all(samples, self.max_length)
        if self.sample_keys:
            samples["media"] = media_ragged(media)
        return assemble(samples, positions, errors, dropped, keep, truncated, turns, encoded.prompt_lengths)


def _without(lengths: np.ndarray, samples: list[int]) -> np.ndarray:
    """``lengths`` with the given samples at 0, so the length check neither drops nor truncates them."""
    if not samples:
        return lengths
    lengths = lengths.copy()
    lengths[samples] = 0
    return lengths
