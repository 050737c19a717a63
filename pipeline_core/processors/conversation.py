"""Rendered conversations -> token sequences and per-token loss weights, a whole batch at once.

Each row's pieces (pieces.py) are laid end to end. All user texts of the batch (deduplicated)
go to the tokenizer in one ``encode_ragged`` call; the format-token pieces are already ids. The
pieces are then gathered into rows with numpy, and the weight of a piece (its message's weight
when the piece is a target, 0 otherwise) is repeated over its tokens::

    sequence     <|im_start|>user\\n hi <|im_end|>\\n<|im_start|>assistant\\n hello <|im_end|>\\n
    loss_weight  0 ........................................................ w ............ w
    loss_mask    loss_weight > 0

``prompt_lengths`` is the position of each row's first trained token of a trained turn (its
answer): what truncation keeps. With ``train_on_prompt`` the prompt's tokens are trained too, but
a sample cut before its answer would train on the prompt alone.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_core.chat.pieces import Piece
from pipeline_core.chat.prompt import PromptStrategy
from pipeline_core.errors import RowError
from pipeline_core.formats.ragged import Ragged, offsets_from_lengths
from pipeline_core.processors.messages import Conversation
from pipeline_core.tokenizer.auto import AutoTokenizer


@dataclass(frozen=True, slots=True)
class Rendered:
    pieces: list[Piece]
    piece_weights: list[float]  # per piece: its message's weight when a target, else 0
    media: list[dict]


@dataclass(frozen=True, slots=True)
class Encoded:
    sequence: Ragged  # int32
    weight: Ragged  # float32, aligned with sequence
    target: Ragged | None = None  # bool, aligned: the tokens of trained turns (None: the mask's)
    piece_lengths: np.ndarray | None = None  # tokens of each piece, all rows' pieces in order

    @property
    def mask(self) -> Ragged:
        return Ragged(self.weight.values > 0, self.weight.offsets)

    @property
    def prompt_lengths(self) -> np.ndarray:
        if self.target is None:
            return first_true(self.mask)
        return first_true(Ragged(self.target.values & (self.weight.values > 0), self.weight.offsets))

    def rows(self, start: int, stop: int) -> Encoded:
        """Rows ``start:stop``, without ``piece_lengths`` (they count pieces of all rows, and a row's
        piece count is not kept here): read those from the whole batch's ``Encoded``."""
        target = None if self.target is None else self.target.slice_rows(start, stop)
        return Encoded(self.sequence.slice_rows(start, stop), self.weight.slice_rows(start, stop), target)


def media_within(
    rows: list[Rendered], piece_lengths: np.ndarray, limit: int | None
) -> tuple[list[list[dict]], list[int]]:
    """(each row's media references without those of messages cut away by truncation to ``limit``
    tokens, the rows where that cannot be told). A message is in the sample when its first token is
    before the cut; a template strategy owns only the trained turns' pieces, so a cut row whose media
    sit in a message it does not own (a user turn) after the last trained turn the cut leaves cannot
    be told, and is listed."""
    out, unsure, start = [], [], 0
    for k, row in enumerate(rows):
        lengths = piece_lengths[start : start + len(row.pieces)]
        start += len(row.pieces)
        if not row.media or limit is None or int(lengths.sum()) <= limit:
            out.append(row.media)
            continue
        begins = np.concatenate([[0], np.cumsum(lengths)[:-1]]).tolist()
        first: dict[int, int] = {}
        for piece, begin in zip(row.pieces, begins):
            first.setdefault(piece.message, begin)
        kept = [ref for ref in row.media if _before(ref["message"], first, limit)]
        if any(_before(ref["message"], first, limit) is None for ref in row.media):
            unsure.append(k)
        out.append(kept)
    return out, unsure


def _before(message: int, first: dict[int, int], limit: int) -> bool | None:
    """Whether ``message`` starts before the cut at ``limit``; None when the render does not say.
    A message without pieces of its own renders before the first piece of any later message."""
    if message in first:
        return first[message] < limit
    if any(begin <= limit for later, begin in first.items() if later > message):
        return True
    return None


def media_cut_error() -> RowError:
    return RowError(
        "media_cut",
        "truncation to max_length cuts this sample, and which of its media stay with the text cannot be "
        "told (they sit in a turn the chat template writes without marking it); raise max_length, or "
        "overflow='drop'",
    )


def render(strategy: PromptStrategy, conversation: Conversation) -> Rendered:
    """The strategy's pieces; a conversation without a single trained token is a RowError."""
    rendered = _weighted(strategy.render_messages(conversation.messages), conversation)
    if not _trains(rendered):
        raise _nothing_to_train()
    return rendered


def weighted_samples(
    samples: list[list[Piece]], conversation: Conversation, prompt_weight: float = 0.0
) -> list[Rendered]:
    """The samples a strategy made of the conversation that train something (at least one).
    ``prompt_weight``: the weight of every piece outside a trained turn (1.0 with train_on_prompt);
    a trained turn's pieces always weigh its message's loss_weight, 0 included."""
    kept = [r for r in (_weighted(pieces, conversation, prompt_weight) for pieces in samples) if _trains(r)]
    if not kept:
        raise _nothing_to_train()
    return [_up_to_its_turn(r) for r in kept] if len(samples) > 1 else kept


def _weighted(pieces: list[Piece], conversation: Conversation, prompt_weight: float = 0.0) -> Rendered:
    weights = conversation.weights
    return Rendered(pieces, [weights[p.message] if p.target else prompt_weight for p in pieces], conversation.media)


def _up_to_its_turn(rendered: Rendered) -> Rendered:
    """One of several samples of a row (``rewritten="per_turn"``): it renders the messages up to its
    trained turn, so it keeps the media of those messages only."""
    last = max(p.message for p in rendered.pieces)
    media = [ref for ref in rendered.media if ref["message"] <= last]
    return Rendered(rendered.pieces, rendered.piece_weights, media)


def _trains(rendered: Rendered) -> bool:
    """Whether a trained turn has a token of weight > 0 (prompt tokens trained by train_on_prompt do not count)."""
    return any(p.target and w > 0 and _has_tokens(p) for p, w in zip(rendered.pieces, rendered.piece_weights))


def _nothing_to_train() -> RowError:
    return RowError(
        "nothing_to_train",
        "no assistant message with loss_weight > 0 to train on (train_on='last' uses only the last "
        "assistant message; a template that rewrites history trains only the last turn unless "
        "rewritten='per_turn'; a turn that only calls tools trains with train_tool_calls=True); add an "
        "assistant turn or fix loss_weight",
        "messages",
    )


def _has_tokens(piece: Piece) -> bool:
    return bool(piece.text) if piece.ids is None else piece.ids.size > 0


def encode_rendered(tokenizer: AutoTokenizer, rows: list[Rendered]) -> Encoded:
    texts: dict[str, int] = {}  # text -> slot; one encode call for the distinct texts
    markup: dict[int, int] = {}  # id(ids array) -> slot; cached format runs are shared objects
    markup_arrays: list[np.ndarray] = []
    slots: list[int] = []  # per piece: text slot k, or markup slot as -(m + 1)
    for row in rows:
        for p in row.pieces:
            slots.append(_slot(p, texts, markup, markup_arrays))
    text_ids = tokenizer.encode_ragged(list(texts))
    pieces = _gather(text_ids, Ragged.from_lists(markup_arrays), np.asarray(slots, dtype=np.int64))
    row_starts = offsets_from_lengths(np.fromiter((len(r.pieces) for r in rows), np.int64, len(rows)))
    offsets = pieces.offsets[row_starts]
    piece_weights = np.fromiter((w for r in rows for w in r.piece_weights), np.float32, len(slots))
    weight = Ragged(np.repeat(piece_weights, pieces.lengths), offsets)
    targets = np.fromiter((p.target for r in rows for p in r.pieces), np.bool_, len(slots))
    target = Ragged(np.repeat(targets, pieces.lengths), offsets)
    return Encoded(Ragged(pieces.values, offsets), weight, target, pieces.lengths)


def _slot(piece: Piece, texts: dict[str, int], markup: dict[int, int], arrays: list[np.ndarray]) -> int:
    if piece.ids is None:
        return texts.setdefault(piece.text, len(texts))
    key = id(piece.ids)
    if key not in markup:
        markup[key] = len(arrays)
        arrays.append(piece.ids)
    return -(markup[key] + 1)


def _gather(text_ids: Ragged, markup_ids: Ragged, slots: np.ndarray) -> Ragged:
    """The pieces in order, one row each: text slots index text_ids, negative ones markup_ids."""
    n_text = len(text_ids)
    values = np.concatenate([text_ids.values.astype(np.int32, copy=False), markup_ids.values])
    offsets = np.concatenate([text_ids.offsets, markup_ids.offsets[1:] + text_ids.offsets[-1]])
    order = np.where(slots >= 0, slots, n_text - slots - 1)
    return Ragged(values, offsets).select(order)


def first_true(mask: Ragged) -> np.ndarray:
    """Per row, the index of its first True (its length when it has none).

    Row i's Trues are ``hits[before[i]:before[i + 1]]``, where ``before`` counts the Trues ahead of
    each row start: one pass over the values and a search per row, no sort.
    """
    first = mask.lengths.copy()
    hits = np.flatnonzero(mask.values)
    before = np.searchsorted(hits, mask.offsets)
    rows = np.flatnonzero(before[1:] > before[:-1])
    first[rows] = hits[before[rows]] - mask.offsets[rows]
    return first
