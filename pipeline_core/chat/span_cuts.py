"""Cutting a rendered conversation's ids at its assistant spans, exactly or not at all.

Where the tokenizer allows it, the text is encoded by segments between its control tokens and each
edge is proven a token boundary there (tokenizer/segments.py). Otherwise, or where that proof
fails, the whole rendered text is encoded once, with token offsets; each span edge (a character
position) is cut at the token that starts there. A token that crosses an edge means no exact
mask exists for the row: it is a ``template_mask`` RowError, counted, never a guess.
"""

from __future__ import annotations

import bisect

import numpy as np

from pipeline_core.chat.pieces import Piece
from pipeline_core.errors import RowError
from pipeline_core.tokenizer.segments import MarkupSegments, Straddle

Span = tuple[int, int, int]  # [start, end) in the rendered text, index of the template message
Sample = tuple[str, list[Span], list[int]]  # (rendered text, spans, v1 owner of each template message)


def cut_samples(samples: list[Sample], segments: MarkupSegments | None, tokenizer) -> tuple[list, int]:
    """Each sample's pieces (or its RowError), and how many were cut by segments without offsets.

    Segments (tokenizer/segments.py) answer every sample, boundary or straddle, when the tokenizer
    allows them; otherwise the texts are encoded whole with offsets, in one call."""
    results: list = [None] * len(samples)
    if segments is not None:
        found = segments.encode_cut_batch([(text, span_edges(text, spans, owners)) for text, spans, owners in samples])
        for i, cuts in enumerate(found):
            text = samples[i][0]
            results[i] = straddle_error(text, cuts) if isinstance(cuts, Straddle) else pieces_at(*samples[i], *cuts)
    rest = [i for i, r in enumerate(results) if r is None]
    encoded = tokenizer.encode_markup_batch_with_offsets([samples[i][0] for i in rest]) if rest else []
    for i, (ids, offsets) in zip(rest, encoded):
        results[i] = cut_pieces(*samples[i], ids, offsets)
    return results, len(samples) - len(rest)


def cut_pieces(
    text: str, spans: list[Span], owners: list[int], ids: np.ndarray, offsets: list[tuple[int, int]]
) -> list[Piece] | RowError:
    """Cut the ids of the whole text at the tokens whose offsets are the span edges."""
    pieces, start, chars = [], 0, 0
    try:
        for value, owner, target in _segments(text, spans, owners):
            chars += len(value)
            end = _cut(offsets, chars, text) if chars < len(text) else ids.size
            pieces.append(Piece(ids=ids[start:end], message=owner, target=target))
            start = end
    except RowError as e:
        return e
    return pieces


def span_edges(text: str, spans: list[Span], owners: list[int]) -> list[int]:
    """The character positions where the pieces of ``cut_pieces`` meet (ascending, inside the text)."""
    return edges_of(span_parts(len(text), spans, owners))


def edges_of(parts: list[tuple[int, int, bool]]) -> list[int]:
    """``span_edges`` from the text's ``span_parts``."""
    return [end for end, _, _ in parts[:-1]]


def pieces_at(text: str, spans: list[Span], owners: list[int], ids: np.ndarray, cuts: list[int]) -> list[Piece]:
    """``cut_pieces`` when the token count before each of ``span_edges`` is already known."""
    bounds = [0, *cuts, ids.size]
    parts = span_parts(len(text), spans, owners)
    return [Piece(ids=ids[bounds[i] : bounds[i + 1]], message=o, target=t) for i, (_, o, t) in enumerate(parts)]


def trained_tokens(parts: list[tuple[int, int, bool]], cuts: list[int], size: int) -> list[tuple[int, int]]:
    """The tokens [start, end) of each span, from the text's ``span_parts`` and the token counts
    before each of its edges (``size``: the text's tokens)."""
    bounds = [0, *cuts, size]
    return [(bounds[i], bounds[i + 1]) for i, (_, _, target) in enumerate(parts) if target]


def span_parts(chars: int, spans: list[Span], owners: list[int]) -> list[tuple[int, int, bool]]:
    """``_segments`` by position: (end, owner, is a span) of each non-empty part, without slicing text."""
    parts, pos = [], 0
    for start, end, k in spans:
        parts += [(pos, start, -1, False), (start, end, owners[k], True)]
        pos = end
    parts.append((pos, chars, -1, False))
    return [(end, owner, target) for start, end, owner, target in parts if end > start]


def _cut(offsets: list[tuple[int, int]], edge: int, text: str) -> int:
    """The number of tokens before character ``edge``; a token crossing it is a RowError."""
    cut = bisect.bisect_left(offsets, edge, key=_start)
    if cut > 0 and offsets[cut - 1][1] > edge:
        raise straddle_error(text, edge)
    return cut


def straddle_error(text: str, edge: int) -> RowError:
    near = text[max(0, edge - 12) : edge + 12]
    return mask_error(
        f"a token crosses the start or end of an assistant turn near {near!r}, so no exact mask exists", None
    )


def _start(offset: tuple[int, int]) -> int:
    return offset[0]


def mask_error(problem: str, owner: int | None) -> RowError:
    return RowError(
        "template_mask",
        f"the chat template cannot be masked exactly: {problem}. Add {{% generation %}} blocks around "
        "the assistant output in the template, or use the chatml strategy",
        None if owner is None else f"messages[{owner}]",
    )


def _segments(text: str, spans: list[Span], owners: list[int]) -> list[tuple[str, int, bool]]:
    """The text cut at the span edges: (part, owning v1 message or -1, is a span), empty parts left out."""
    parts, pos = [], 0
    for start, end, k in spans:
        parts += [(text[pos:start], -1, False), (text[start:end], owners[k], True)]
        pos = end
    parts.append((text[pos:], -1, False))
    return [p for p in parts if p[0]]
