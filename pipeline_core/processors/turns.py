"""Which trained turn a sample is, when a row makes one sample per turn (``rewritten="per_turn"``).

A sample dropped from such a row (too long for ``max_length``, or for a pack) leaves the row's
other turns written, so its quarantine line must say which turn it was: ``"turn": k, "turns": n``
and a message starting "trained turn k of n".
"""

from __future__ import annotations

import numpy as np

from pipeline_core.errors import RowError


def turn_numbers(per_row: np.ndarray) -> np.ndarray | None:
    """``[n_samples, 2]``: each sample's 1-based turn and the number of samples its row made, or
    None when no row made more than one."""
    if per_row.max(initial=1) <= 1:
        return None
    first = np.repeat(np.cumsum(per_row) - per_row, per_row)  # each sample's row's first sample
    count = np.repeat(per_row, per_row)
    return np.stack([np.arange(count.size) - first + 1, count], axis=1)


def named(error: RowError, turns: np.ndarray | None, sample: int) -> RowError:
    """``error`` of sample ``sample`` saying which turn it is, when its row made several samples."""
    if turns is None or turns[sample, 1] <= 1:
        return error
    k, n = int(turns[sample, 0]), int(turns[sample, 1])
    message = f"trained turn {k} of {n} (one sample per turn): {error.message}"
    return RowError(error.reason, message, error.field, turn=(k, n))


def name_turns(errors: list[tuple[int, RowError]], turns: np.ndarray | None) -> list[tuple[int, RowError]]:
    """``errors`` by sample index, each naming its turn (see ``named``)."""
    return [(i, named(e, turns, i)) for i, e in errors]
