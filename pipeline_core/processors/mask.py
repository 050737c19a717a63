"""The mask controls trainers expose, applied to an encoded batch's loss weights.

::

    train_on_prompt=True   every token is trained: prompt, system, tool and format tokens weigh 1,
                           assistant turns keep their loss_weight, 0 included (LLaMA-Factory's
                           train_on_prompt); given to the render as ``prompt_weight``
    train_on_eos="turn"    each trained assistant turn's end tokens are trained (the default)
                 "last"    only the last trained turn of a sample keeps its end tokens
                 "none"    no turn's end tokens are trained

A turn's *end tokens* are what the strategy writes after an answer: the tail of its trained span
made only of *end-of-turn ids* and blank (whitespace) tokens, from its first end-of-turn id on:
ChatML's ``<|im_end|>`` and the ``\\n`` after it, Llama-3's ``<|eot_id|>``, Phi-3.5's last
``<|end|>\\n<|endoftext|>``, alpaca's eos. The end-of-turn ids are found once per processor by
rendering a probe conversation with the strategy itself (``end_of_turn_ids``): the special tokens
after a probe answer. Other control tokens stay part of the answer and trained (``</tool_call>``
closing a tool call, Qwen3's ``<think>\\n\\n</think>\\n\\n``), as transformers' assistant mask
trains them. A trained span whose tail has no end-of-turn id has no end token to leave out: with
``train_on_eos`` other than ``"turn"`` such a row is a RowError (``no_end_token``), never trained on a
guess; a sample left with no trained token (an empty answer whose end tokens were all it trained) is
a RowError (``nothing_to_train``). The two settings exclude each other.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_core.converters.sample import text_message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.ragged import Ragged

TRAIN_ON_EOS = ("turn", "last", "none")


@dataclass(frozen=True, slots=True)
class MaskControls:
    train_on_prompt: bool = False
    train_on_eos: str = "turn"

    def __post_init__(self) -> None:
        if self.train_on_eos not in TRAIN_ON_EOS:
            raise ConfigError(f"train_on_eos must be one of {', '.join(TRAIN_ON_EOS)}, got {self.train_on_eos!r}")
        if self.train_on_prompt and self.train_on_eos != "turn":
            raise ConfigError("train_on_prompt trains every token, end tokens included; leave train_on_eos='turn'")

    @property
    def prompt_weight(self) -> float:
        """The weight of every token outside a trained turn."""
        return 1.0 if self.train_on_prompt else 0.0

    @property
    def default(self) -> bool:
        return not self.train_on_prompt and self.train_on_eos == "turn"

    @property
    def trims_ends(self) -> bool:
        """Whether end tokens are left out of some turns (``row_weights`` has work to do)."""
        return self.train_on_eos != "turn"

    def describe(self, end_ids=()) -> dict:
        """The controls, and what they act on: the end-of-turn ids left out, the prompt's weight
        (both recorded since 2026-12-06, when they changed: outputs written before get other keys)."""
        out = {"train_on_prompt": self.train_on_prompt, "train_on_eos": self.train_on_eos}
        if self.train_on_prompt:
            out["prompt_weight"] = self.prompt_weight
            # since 2026-12-07 a cut (max_length, pack_size) keeps the answer: a prompt filling the
            # limit is prompt_too_long (it was written as the prompt alone)
            out["cut_keeps"] = "answer"
        if self.trims_ends:
            out["end_of_turn_ids"] = sorted(int(i) for i in end_ids)
        return out

    def row_weights(self, ids: np.ndarray, weight: np.ndarray, ends: EndTokens) -> np.ndarray:
        """One sample's weights with end tokens left out (``ids``/``weight`` aligned); only for
        ``trims_ends`` (train_on_prompt's weights come from the render: ``prompt_weight``)."""
        if not self.trims_ends:
            return weight
        out = weight.copy()
        runs = _runs(weight > 0)
        for n, (start, end) in enumerate(runs):
            if self.train_on_eos == "last" and n == len(runs) - 1:
                continue
            out[ends.start(ids, start, end) : end] = 0
        if runs and not out.any():
            raise RowError(
                "nothing_to_train",
                f"with train_on_eos={self.train_on_eos!r} this sample trains no token: its answers are empty, "
                "their end tokens were all it trained; drop such rows or use train_on_eos='turn'",
                "messages",
            )
        return out


class EndTokens:
    """Which ids end a turn: the strategy's end-of-turn ids, and the blank ids that may follow them."""

    def __init__(self, end_ids, decode) -> None:
        self.special = frozenset(int(i) for i in end_ids)
        self._decode, self._blank = decode, {}

    def is_blank(self, token: int) -> bool:
        if token not in self._blank:
            self._blank[token] = self._decode([token]).isspace()
        return self._blank[token]

    def start(self, ids: np.ndarray, start: int, end: int) -> int:
        """Where the end tokens of the trained span ``[start, end)`` begin."""
        first = None
        for k in range(end - 1, start - 1, -1):
            token = int(ids[k])
            if token in self.special:
                first = k
            elif not self.is_blank(token):
                break
        if first is None:
            raise RowError(
                "no_end_token",
                "train_on_eos needs each trained turn to end with a special token (its end of turn), and this "
                "one has none; use a strategy whose markers are the tokenizer's control tokens, or "
                "train_on_eos='turn'",
                "messages",
            )
        return first


PROBE_ANSWER = "h5pipe end of turn probe"


def end_of_turn_ids(strategy, tokenizer) -> frozenset[int]:
    """The special ids ``strategy`` writes after an assistant answer: those in the trained text that
    follows a probe answer, in a two-turn conversation it renders (so a template that ends its last
    turn otherwise, Phi-3.5's ``<|endoftext|>``, is seen too)."""
    turns = [("user", "u"), ("assistant", PROBE_ANSWER), ("user", "v"), ("assistant", PROBE_ANSWER)]
    try:
        pieces = strategy.render_messages([text_message(role, text) for role, text in turns])
    except RowError as e:
        raise ConfigError(
            f"train_on_eos needs to find the end of an assistant turn, and the {strategy.name} strategy "
            f"could not render a plain two-turn conversation to show it ({e}); use train_on_eos='turn'"
        ) from e
    trained = "".join(p.text if p.ids is None else tokenizer.decode(p.ids.tolist()) for p in pieces if p.target)
    special = {tokenizer.token_to_id(t) for t in tokenizer.special_tokens}
    tails = trained.split(PROBE_ANSWER)[1:]
    return frozenset(i for tail in tails for i in tokenizer.encode_markup(tail) if i in special)


def controlled(controls: MaskControls, sequence: Ragged, weight: Ragged, ends: EndTokens) -> tuple[Ragged, list]:
    """The batch's weights under ``controls`` and the (sample index, RowError) of samples it cannot apply to."""
    rows, errors = [], []
    for i in range(len(sequence)):
        try:
            rows.append(controls.row_weights(sequence[i], weight[i], ends))
        except RowError as e:
            errors.append((i, e))
            rows.append(np.zeros(len(weight[i]), np.float32))
    values = np.concatenate(rows).astype(np.float32) if rows else np.zeros(0, np.float32)
    return Ragged(values, weight.offsets), errors


def _runs(mask: np.ndarray) -> list[tuple[int, int]]:
    edges = np.diff(np.concatenate([[0], mask.astype(np.int8), [0]]))
    return list(zip(np.flatnonzero(edges == 1).tolist(), np.flatnonzero(edges == -1).tolist()))
