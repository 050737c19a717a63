"""Single-turn (query, response) rows through the template strategy's frame, as one token batch.

A flat sft row is the conversation ``[user: query, assistant: response]``. When the template has a
frame for that shape (chat/frames.py) and the tokenizer encodes markup by segments
(tokenizer/segments.py), a whole batch of such rows is: each row's contents filled into the frame,
every segment of every row encoded in one backend call, each row's span edges cut there::

    ids   = encode_markup(frame.fill([query, response]))     (all rows back to back, int32)
    span  = the tokens of the assistant turn: [tokens before its start, tokens before its end)

No conversation dicts, pieces or per-row id arrays are built. The answer is the general path's
(template.py renders the row from the same frame, span_cuts.cut_samples cuts it by the same
segments), with the same RowErrors (``special_token_in_text``, ``template_mask``) and the same
``fast_path_stats`` counts. A pair whose contents fail one of the frame's guards (Qwen3: a
response holding ``</think>``) is rendered by Jinja as the general path renders it, counted
``guard_miss``, and its text joins the batch. ``pair_batch`` is None when this does not apply: no
frame for the shape, no segment encoding for the tokenizer, or a content that is empty or blank
(another shape).
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from pipeline_core.chat.messages import template_conversation
from pipeline_core.chat.span_cuts import edges_of, span_parts, straddle_error, trained_tokens
from pipeline_core.converters.sample import text_message
from pipeline_core.errors import RowError
from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer.segments import Straddle

PAIR = (("user", True), ("assistant", True))  # the shape of a (query, response) row
OWNERS = [0, 1]  # template message k is v1 message k


@dataclass(frozen=True, slots=True)
class PairBatch:
    sequence: Ragged  # int32, the kept pairs' ids
    spans: np.ndarray  # int64 (kept, 2): each kept pair's trained tokens [start, end)
    kept: np.ndarray  # int64, the kept pairs' indices
    errors: list[tuple[int, RowError]]  # (index, error) of the other pairs


def pair_batch(strategy, pairs: list[tuple[str, str]]) -> PairBatch | None:
    """The pairs' ids and trained spans, or None (the general path renders them)."""
    frame = strategy.frame_for(strategy.template, PAIR)
    segments = strategy.segments
    if frame is None or segments is None or not all(_filled(q) and _filled(r) for q, r in pairs):
        return None
    rendered, errors, missed = _rendered(strategy, frame, pairs)
    joined, starts, found = segments.encode_cut_joined([(text, edges_of(parts)) for _, text, parts in rendered])
    strategy.fast_path["frame"] += len(rendered) - missed
    strategy.fast_path["segments"] += len(rendered)
    kept, spans, rows = [], [], []
    for r, ((i, text, parts), cuts) in enumerate(zip(rendered, found)):
        if isinstance(cuts, Straddle):
            errors.append((i, straddle_error(text, cuts)))
            continue
        [(start, end)] = trained_tokens(parts, cuts, starts[r + 1] - starts[r])
        kept.append(i)
        spans.append((start, end))
        rows.append(r)
    spans_array = np.asarray(spans, dtype=np.int64).reshape(-1, 2)
    return PairBatch(
        _rows(joined, starts, rows), spans_array, np.asarray(kept, dtype=np.int64), sorted(errors, key=_index)
    )


def _rendered(strategy, frame, pairs: list[tuple[str, str]]) -> tuple[list, list[tuple[int, RowError]], int]:
    """(index, text, span parts) of each pair without a special token string; the others' errors;
    how many of the rendered ones missed a guard (Jinja rendered them)."""
    rendered, errors, missed = [], [], 0
    special = strategy.special_token_search
    for i, (query, response) in enumerate(pairs):
        if special(query) or special(response):
            try:
                strategy.check_texts([("content", query)], 0)
                strategy.check_texts([("content", response)], 1)
            except RowError as e:
                errors.append((i, e))
                continue
        framed = frame.render([query, response])
        if framed is None:
            try:
                framed = _by_jinja(strategy, query, response)
            except RowError as e:
                errors.append((i, e))
                continue
            missed += 1
        text, spans = framed
        rendered.append((i, text, span_parts(len(text), spans, OWNERS)))
    return rendered, errors, missed


def _by_jinja(strategy, query: str, response: str):
    """A pair that missed a guard: its text and spans rendered by Jinja, as template.py renders it."""
    strategy.fast_path["guard_miss"] += 1
    strategy.fast_path["jinja"] += 1
    conversation = template_conversation([text_message("user", query), text_message("assistant", response)])
    [sample] = strategy.jinja_texts(strategy.template, conversation, strategy.rewritten == "per_turn")
    return sample


def _filled(content: str) -> bool:
    """Not empty once stripped: the shape PAIR (an empty or blank content is another shape, or Jinja)."""
    return bool(content) and not content.isspace()


def _rows(joined: np.ndarray, starts: list[int], rows: list[int]) -> Ragged:
    every = Ragged(joined, np.asarray(starts, dtype=np.int64))
    kept = np.zeros(len(every), dtype=bool)
    kept[rows] = True
    return every.keep(kept)


def _index(error: tuple[int, RowError]) -> int:
    return error[0]
