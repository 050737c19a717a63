"""One dataset as a Source: a ``datasets.Dataset`` or a list of dicts (sized), or an
``IterableDataset`` (streaming, never materialised).

Sized rows are read as Arrow in batches of ``ROW_BATCH``, so reading any range costs only that range.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np

from pipeline_core.converters import Converter
from pipeline_core.sources.base import DatasetCounts, Record

ROW_BATCH = 8192


class RowsFromRecords:
    """``iter_rows`` and ``__iter__`` of a source, as the plain rows of its ``records``."""

    def iter_rows(self, start: int, stop: int) -> Iterator[dict]:
        require_sized(self, "iter_rows")
        return (r.row for r in self.records(start, stop))

    def __iter__(self) -> Iterator[dict]:
        return (r.row for r in self.records())


class DatasetSource(RowsFromRecords):
    def __init__(self, data, *, name: str, fingerprint: Callable[[], str], converter: Converter | None = None):
        self.name = name
        self.data = data
        self.converters = {name: converter}
        self.num_rows: int | None = len(data) if hasattr(data, "__len__") else None
        self._arrow = data.with_format("arrow") if hasattr(data, "with_format") and self.num_rows is not None else None
        self._fingerprint_of = fingerprint
        self._fingerprint: str | None = None

    @property
    def fingerprint(self) -> str:
        if self._fingerprint is None:
            self._fingerprint = self._fingerprint_of()
        return self._fingerprint

    @property
    def streaming(self) -> bool:
        return self.num_rows is None

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        if self.num_rows is None:
            rows = islice(iter(self.data), start, stop)
            return (Record(self.name, i, row) for i, row in enumerate(rows, start))
        stop = self.num_rows if stop is None else min(stop, self.num_rows)
        return self._sized_records(start, stop)

    def take(self, indices: np.ndarray) -> Iterator[Record]:
        """Rows at ``indices`` (sized only), in that order."""
        for lo in range(0, len(indices), ROW_BATCH):
            batch = indices[lo : lo + ROW_BATCH].tolist()
            rows = self._arrow[batch].to_pylist() if self._arrow is not None else [self.data[i] for i in batch]
            yield from (Record(self.name, i, row) for i, row in zip(batch, rows))

    def summary(self) -> dict[str, DatasetCounts]:
        return {self.name: DatasetCounts(self.name, rows_available=self.num_rows, rows_taken=self.num_rows)}

    def _sized_records(self, start: int, stop: int) -> Iterator[Record]:
        for lo in range(start, stop, ROW_BATCH):
            hi = min(stop, lo + ROW_BATCH)
            rows = self._arrow[lo:hi].to_pylist() if self._arrow is not None else self.data[lo:hi]
            yield from (Record(self.name, i, row) for i, row in enumerate(rows, lo))


def require_sized(source, what: str) -> int:
    if source.num_rows is None:
        raise TypeError(
            f"{what} needs a sized source; {source.name!r} is streaming: iterate it, or open it with streaming=False"
        )
    return source.num_rows
