"""``limit``: the first ``n`` rows of a source, for a trial run (``open_source(..., limit=n)``)."""

from __future__ import annotations

from collections.abc import Iterator
from itertools import islice

from pipeline_core.sources.base import DatasetCounts, Record, Source
from pipeline_core.sources.fingerprint import digest
from pipeline_core.sources.single import RowsFromRecords


class LimitedSource(RowsFromRecords):
    """``source`` cut after its first ``limit`` records (in the source's own order, after mixing)."""

    def __init__(self, source: Source, limit: int) -> None:
        self.source, self.limit = source, limit
        self.name, self.converters = source.name, source.converters
        self.num_rows = None if source.num_rows is None else min(source.num_rows, limit)

    @property
    def fingerprint(self) -> str:
        """The source's fingerprint and the limit: another limit is other rows."""
        return digest("limit", self.source.fingerprint, self.limit)

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        """The source's records ``start..stop-1``, never past the limit."""
        stop = self.limit if stop is None else min(stop, self.limit)
        if self.source.num_rows is None:
            return islice(self.source.records(start), max(stop - start, 0))
        return self.source.records(start, stop)

    def summary(self) -> dict[str, DatasetCounts]:
        """The source's own plan (``rows_taken`` before the limit; ``rows_read`` says what was read)."""
        return self.source.summary()
