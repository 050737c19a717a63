"""``encode_markup`` through the fast user-text backend, with exact token cuts at character edges.

`tokenizers` encodes markup in two steps: it splits the text at the added tokens (leftmost-longest
match), then normalizes, pre-tokenizes and encodes each piece between them on its own. For a
tokenizer with no normalizer, a byte-level pre-tokenizer that adds no prefix space, a BPE model and
added tokens that strip nothing around them, that is exactly::

    encode_markup(text) = seg_0 ids, added id, seg_1 ids, added id, ...     (seg_i: pieces between)

and each segment can go through the backend that encodes user text (gigatoken where verified): a
segment holds no added-token string, so encoding it as text is encoding it as markup.

Cuts. An edge at a segment's start or end is a token boundary. An edge inside a segment is one
exactly when the bytes of the segment's first ``n`` tokens add up to the bytes before the edge, for
some ``n``: byte-level tokens spell bytes (one alphabet character per byte), so token byte lengths
are known from the vocabulary. When no ``n`` does, a token truly straddles the edge: the answer is
a ``Straddle`` naming the edge, exactly what the offsets of the whole encoding would show.
"""

from __future__ import annotations

import json
import re
from bisect import bisect_left
from collections.abc import Sequence
from itertools import accumulate

import numpy as np
from tokenizers import pre_tokenizers

SHORT = 64  # bytes before an edge up to which its cut is found by a Python sum, not numpy
SPLITTERS = {"Split", "Digits", "Punctuation"}  # per-piece pre-tokenizers that add or strip nothing
Cuts = tuple[np.ndarray, list[int]]  # (ids, number of tokens before each edge)


class Straddle(int):
    """The character edge that a token (or a control token) crosses: no exact cut exists there."""


class MarkupSegments:
    """Markup encoding by segments; ``of(tokenizer)`` is None when the equality above does not hold."""

    def __init__(self, tokenizer, added: dict[str, int], byte_lengths: np.ndarray) -> None:
        self._tokenizer = tokenizer
        self._added = added
        self._bytes = byte_lengths  # bytes spelled by each id of the model vocabulary
        self._byte_list = byte_lengths.tolist()
        ordered = sorted(added, key=len, reverse=True)  # re tries alternatives in order: longest first
        # one group: re.split keeps the control tokens, between the segments
        self._split = re.compile("(" + "|".join(map(re.escape, ordered)) + ")") if ordered else None

    @classmethod
    def of(cls, tokenizer) -> MarkupSegments | None:
        config = json.loads(tokenizer.tokenizer_json)
        tokens = tokenizer.added_tokens
        if config.get("normalizer") is not None or (config.get("model") or {}).get("type") != "BPE":
            return None
        if not _byte_level(config.get("pre_tokenizer")) or not _byte_level_decoder(config.get("decoder")):
            return None
        if any(t.lstrip or t.rstrip or t.single_word or not t.content for t in tokens.values()):
            return None
        lengths = _byte_lengths(config["model"].get("vocab") or {}, tokenizer.vocab_size)
        return None if lengths is None else cls(tokenizer, {t.content: i for i, t in tokens.items()}, lengths)

    def encode_cut_batch(self, items: Sequence[tuple[str, list[int]]]) -> list[Cuts | Straddle]:
        """Per (text, edges): ``encode_markup(text)`` ids and the tokens before each edge, or the
        first edge a token straddles. All segments go to the backend in one call."""
        joined, starts, cuts = self.encode_cut_joined(items)
        return [c if isinstance(c, Straddle) else (joined[starts[r] : starts[r + 1]], c) for r, c in enumerate(cuts)]

    def encode_cut_joined(self, items: Sequence[tuple[str, list[int]]]) -> tuple[np.ndarray, list[int], list]:
        """``encode_cut_batch`` without slicing: every text's ids back to back (int32), the row
        offsets into them (text r is ``joined[starts[r]:starts[r + 1]]``), and each text's cuts or Straddle."""
        if not items:
            return np.zeros(0, dtype=np.int32), [0], []
        splits = [self._pieces(text) for text, _ in items]
        counts = np.fromiter(((len(p) + 1) // 2 for p in splits), dtype=np.int64, count=len(splits))
        encoded = self._tokenizer.encode_ragged([segment for pieces in splits for segment in pieces[::2]])
        values, offsets = encoded.values, encoded.offsets
        joined, firsts = self._joined_all(splits, counts, values, offsets)
        # each text has one control token fewer than segments: its start is its segments' tokens plus
        # the control tokens of the texts before it
        bounds = np.append(firsts, counts.sum())  # each text's first segment, and the end
        starts = (offsets[bounds] + bounds - np.arange(len(items) + 1)).tolist()
        cuts = [
            self._cuts(pieces, edges, values, offsets[first : first + n + 1])
            for (_, edges), pieces, first, n in zip(items, splits, firsts.tolist(), counts.tolist())
        ]
        return joined, starts, cuts

    def _joined_all(self, splits: list[list[str]], counts: np.ndarray, values: np.ndarray, offsets: np.ndarray):
        """Every text's ids back to back: each control token's id inserted after the segment before it;
        and the index of each text's first segment."""
        firsts = np.concatenate([[0], np.cumsum(counts)[:-1]]).astype(np.int64)
        last = np.zeros(int(counts.sum()), dtype=bool)
        last[firsts + counts - 1] = True
        tokens = np.fromiter((self._added[t] for p in splits for t in p[1::2]), dtype=np.int32)
        return np.insert(values, offsets[1:][~last], tokens).astype(np.int32, copy=False), firsts

    def _pieces(self, text: str) -> list[str]:
        """[segment, control token, segment, ..., segment], as the tokenizer splits markup."""
        return self._split.split(text) if self._split is not None else [text]

    def _cuts(
        self, pieces: list[str], edges: list[int], values: np.ndarray, offsets: np.ndarray
    ) -> list[int] | Straddle:
        """The tokens before each edge of one text (``offsets``: its segments' rows in ``values``)."""
        offsets = offsets.tolist()
        base = offsets[0]  # tokens of the segments before segment q: offsets[q] - base
        ends = list(accumulate(map(len, pieces)))  # character end of each piece
        cuts = []
        for edge in edges:
            p = bisect_left(ends, edge)  # the piece holding the edge, or ending at it
            q, in_token = divmod(p, 2)  # piece 2q: segment q; piece 2q+1: the control token after it
            if ends[p] == edge:  # through segment q and q control tokens, plus this one if it is one
                cuts.append(offsets[q + 1] - base + q + in_token)
            elif in_token:
                return Straddle(edge)  # inside a control token
            else:
                start = ends[p] - len(pieces[p])
                n = self._tokens_spelling(values[offsets[q] : offsets[q + 1]], pieces[p][: edge - start])
                if n is None:
                    return Straddle(edge)
                cuts.append(offsets[q] - base + q + n)
        return cuts

    def _tokens_spelling(self, ids: np.ndarray, left: str) -> int | None:
        """How many of the segment's first tokens spell exactly ``left``, or None (one straddles it)."""
        want = len(left.encode("utf-8"))
        if want <= SHORT:  # most edges follow a short literal ("assistant\n"): a few tokens, summed in Python
            spelled, lengths = 0, self._byte_list
            for n, token in enumerate(ids[:want].tolist(), 1):
                spelled += lengths[token]
                if spelled >= want:
                    return n if spelled == want else None
            return None
        spelled = np.cumsum(self._bytes[ids[:want]])  # every token spells at least one byte
        n = int(np.searchsorted(spelled, want))
        return n + 1 if n < spelled.size and spelled[n] == want else None


def _byte_lengths(vocab: dict[str, int], size: int) -> np.ndarray | None:
    """Bytes spelled by each vocabulary id; None unless every token is over the byte-level alphabet."""
    alphabet = set(pre_tokenizers.ByteLevel.alphabet())
    lengths = np.zeros(size, dtype=np.int64)
    for token, i in vocab.items():
        if not set(token) <= alphabet or i >= size:
            return None
        lengths[i] = len(token)
    return lengths


def _byte_level(pre) -> bool:
    if not pre:
        return False
    steps = pre.get("pretokenizers", []) if pre.get("type") == "Sequence" else [pre]
    levels = [s for s in steps if s.get("type") == "ByteLevel"]
    others_ok = all(s.get("type") in SPLITTERS | {"ByteLevel"} for s in steps)
    return bool(levels) and others_ok and not any(s.get("add_prefix_space") for s in levels)


def _byte_level_decoder(decoder) -> bool:
    return bool(decoder) and decoder.get("type") == "ByteLevel"
