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
from collections.abc import Sequence

import numpy as np
from tokenizers import pre_tokenizers

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
        ordered = sorted(added, key=len, reverse=True)  # re tries alternatives in order: longest first
        self._split = re.compile("|".join(map(re.escape, ordered))) if ordered else None

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
        plans = [self._plan(text, edges) for text, edges in items]
        texts = [t for plan in plans for t in plan.texts]
        encoded = self._tokenizer.encode_ragged(texts) if texts else None
        out, first = [], 0
        for plan in plans:
            out.append(plan.assemble(encoded, first, self._bytes))
            first += len(plan.texts)
        return out

    def _plan(self, text: str, edges: list[int]) -> _Plan:
        plan, pos = _Plan(), 0
        marks = self._split.finditer(text) if self._split is not None else ()
        for found in marks:
            plan.segment(text, pos, found.start(), edges)
            plan.added(self._added[found.group()], found.start(), found.end(), edges)
            pos = found.end()
        plan.segment(text, pos, len(text), edges)
        return plan


class _Plan:
    """One text's parts in order: ("seg", index into texts) | ("add", id), and where each edge falls."""

    __slots__ = ("texts", "parts", "edges", "broken")

    def __init__(self) -> None:
        self.texts: list[str] = []
        self.parts: list[tuple[str, int]] = []
        self.edges: list[tuple[int, int, int]] = []  # (part the edge precedes or is in, its bytes in it or -1, edge)
        self.broken: Straddle | None = None

    def segment(self, text: str, start: int, end: int, edges: list[int]) -> None:
        if start == end:
            return
        self._edges_at(start, edges)
        self.parts.append(("seg", len(self.texts)))
        self.texts.append(text[start:end])
        for edge in edges:
            if start < edge < end:
                self.edges.append((len(self.parts) - 1, len(text[start:edge].encode("utf-8")), edge))

    def added(self, token_id: int, start: int, end: int, edges: list[int]) -> None:
        self._edges_at(start, edges)
        inside = [edge for edge in edges if start < edge < end]
        if inside and self.broken is None:
            self.broken = Straddle(inside[0])  # an edge inside a control token
        self.parts.append(("add", token_id))

    def _edges_at(self, position: int, edges: list[int]) -> None:
        self.edges += [(len(self.parts), -1, edge) for edge in edges if edge == position]

    def assemble(self, encoded, first: int, byte_lengths: np.ndarray) -> Cuts | Straddle:
        if self.broken is not None:
            return self.broken
        arrays, before, total = [], [], 0  # before: token count ahead of each part
        for kind, value in self.parts:
            before.append(total)
            arrays.append(encoded[first + value] if kind == "seg" else np.array([value], dtype=np.int32))
            total += len(arrays[-1])
        cuts = []
        for part, left_bytes, edge in self.edges:
            if left_bytes < 0:
                cuts.append(before[part])
                continue
            spelled = np.cumsum(byte_lengths[arrays[part]])
            n = int(np.searchsorted(spelled, left_bytes))
            if n >= spelled.size or spelled[n] != left_bytes:
                return Straddle(edge)
            cuts.append(before[part] + n + 1)
        ids = np.concatenate(arrays) if arrays else np.zeros(0, dtype=np.int32)
        return ids.astype(np.int32, copy=False), cuts


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
