"""Cutting a rendered conversation's ids at its assistant spans, exactly or not at all.

The whole rendered text is encoded once, with token offsets; each span edge (a character
position) is cut at the token that starts there. A token that crosses an edge means no exact
mask exists for the row: it is a ``template_mask`` RowError, counted, never a guess.
"""

from __future__ import annotations

import bisect

import numpy as np

from pipeline_core.chat.pieces import Piece
from pipeline_core.errors import RowError

Span = tuple[int, int, int]  # [start, end) in the rendered text, index of the template message


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


def _cut(offsets: list[tuple[int, int]], edge: int, text: str) -> int:
    """The number of tokens before character ``edge``; a token crossing it is a RowError."""
    cut = bisect.bisect_left(offsets, edge, key=_start)
    if cut > 0 and offsets[cut - 1][1] > edge:
        near = text[max(0, edge - 12) : edge + 12]
        raise mask_error(
            f"a token crosses the start or end of an assistant turn near {near!r}, so no exact mask exists", None
        )
    return cut


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
