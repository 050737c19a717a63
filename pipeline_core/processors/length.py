"""The over-length policy: drop a too-long sample, or truncate its response; count both.

Truncation keeps the prompt whole and cuts the end of the response, so a truncated sample still
trains on the first part of its answer. For a conversation the prompt is everything before its
first trained token; later turns are cut like the response. A sample whose prompt alone reaches ``max_length`` has
nothing left to train on and is dropped with reason ``prompt_too_long``, never cut silently.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import RowError
from pipeline_core.formats.ragged import Ragged, gather_index, offsets_from_lengths


def truncate(r: Ragged, lengths: np.ndarray) -> Ragged:
    """Keep the first ``lengths[i]`` items of every sequence."""
    lengths = np.minimum(lengths, r.lengths)
    return Ragged(r.values[gather_index(r.offsets[:-1], lengths)], offsets_from_lengths(lengths))


def truncate_all(samples: dict[str, Ragged], max_length: int | None) -> dict[str, Ragged]:
    """Cut every aligned key of a batch to ``max_length`` items per sequence."""
    if max_length is None or not samples:
        return samples
    limit = np.full(len(next(iter(samples.values()))), max_length)
    return {key: truncate(ragged, limit) for key, ragged in samples.items()}


def too_long_error(length: int, max_length: int) -> RowError:
    return RowError(
        "too_long",
        f"sample has {length} tokens > max_length {max_length}; raise max_length or use overflow='truncate'",
    )


def prompt_too_long_error(prompt: int, max_length: int) -> RowError:
    return RowError(
        "prompt_too_long",
        f"the prompt alone has {prompt} tokens >= max_length {max_length}, so no response token would "
        "remain after truncation; raise max_length",
    )


def over_length(
    lengths: np.ndarray, prompt_lengths: np.ndarray | None, max_length: int | None, overflow: str
) -> tuple[np.ndarray, list[tuple[int, RowError]], int]:
    """Decide per sample: (keep mask, errors for dropped samples, number truncated).

    ``lengths`` is the longest sequence of each sample; ``prompt_lengths`` its untouchable part.
    """
    keep = np.ones(len(lengths), dtype=bool)
    if max_length is None:
        return keep, [], 0
    long_rows = np.flatnonzero(lengths > max_length)
    errors: list[tuple[int, RowError]] = []
    truncated = 0
    for i in long_rows.tolist():
        prompt = 0 if prompt_lengths is None else int(prompt_lengths[i])
        if overflow == "truncate" and prompt < max_length:
            truncated += 1
            continue
        error = (
            prompt_too_long_error(prompt, max_length)
            if overflow == "truncate"
            else too_long_error(int(lengths[i]), max_length)
        )
        errors.append((i, error))
        keep[i] = False
    return keep, errors, truncated
