"""One dataset as a Source: a ``datasets.Dataset`` or a list of dicts (sized), or an
``IterableDataset`` (streaming, never materialised).

Sized rows are read as Arrow in batches of ``ROW_BATCH``, so reading any range costs only that range.
They come out exactly as ``datasets`` gives them (``dataset[i]``): a column whose feature needs
decoding is decoded through the dataset's features. The only such feature JSON can hold is ``Json``
(objects whose keys differ from row to row, stored by ``datasets`` as JSON text); a column of media
(Image, Audio, ...) or of bytes, decimals or durations is refused with its name, never written
as something else.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator
from itertools import islice

import numpy as np

from pipeline_core.converters import Converter
from pipeline_core.errors import ConfigError
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
        self._decoded: tuple[str, ...] | None = None  # columns to decode, found on the first read
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
        self._check_features()
        if self.num_rows is None:
            rows = islice(iter(self.data), start, stop)
            return (Record(self.name, i, row) for i, row in enumerate(rows, start))
        stop = self.num_rows if stop is None else min(stop, self.num_rows)
        return self._sized_records(start, stop)

    def take(self, indices: np.ndarray) -> Iterator[Record]:
        """Rows at ``indices`` (sized only), in that order."""
        for lo in range(0, len(indices), ROW_BATCH):
            batch = indices[lo : lo + ROW_BATCH].tolist()
            rows = self._rows(self._arrow[batch]) if self._arrow is not None else own([self.data[i] for i in batch])
            yield from (Record(self.name, i, row) for i, row in zip(batch, rows))

    def summary(self) -> dict[str, DatasetCounts]:
        return {self.name: DatasetCounts(self.name, rows_available=self.num_rows, rows_taken=self.num_rows)}

    def _sized_records(self, start: int, stop: int) -> Iterator[Record]:
        for lo in range(start, stop, ROW_BATCH):
            hi = min(stop, lo + ROW_BATCH)
            rows = self._rows(self._arrow[lo:hi]) if self._arrow is not None else own(self.data[lo:hi])
            yield from (Record(self.name, i, row) for i, row in enumerate(rows, lo))

    def _check_features(self) -> None:
        features = getattr(self.data, "features", None)
        if self._decoded is None and features is not None:
            self._decoded = columns_to_decode(features, self.name)

    def _rows(self, table) -> list[dict]:
        """The rows of an Arrow batch as ``datasets`` gives them; plain Arrow when nothing needs decoding."""
        self._check_features()
        if not self._decoded:
            return table.to_pylist()
        columns = table.to_pydict()
        for name in self._decoded:
            columns[name] = self.data.features.decode_column(columns[name], name)
        names = list(columns)
        return [dict(zip(names, values)) for values in zip(*columns.values())]


def own(rows: list) -> list:
    """Copies of a list source's rows: the caller's dicts, which a process_func editing its row in
    place would change (a second export of the same list then gave other lines)."""
    return copy.deepcopy(rows)


# Arrow types whose Python values (bytes, Decimal, timedelta) have no JSON form.
_NOT_JSON_DTYPES = ("binary", "large_binary", "binary_view", "decimal", "duration", "month_day_nano_interval")


def columns_to_decode(features, dataset: str) -> tuple[str, ...]:
    """The columns ``datasets`` decodes (only ``Json`` ones are accepted); any column whose values
    JSON cannot hold is a ``ConfigError`` naming it and saying how to export the rest."""
    from datasets.features.features import require_decoding

    for name, feature in features.items():
        problem = _not_json(feature)
        if problem is not None:
            raise ConfigError(
                f"dataset {dataset!r}: column {name!r} holds {problem}, which JSON cannot represent; drop it with "
                f"dataset.remove_columns({name!r}) or turn it into strings or numbers with dataset.map before exporting"
            )
    return tuple(name for name, feature in features.items() if require_decoding(feature))


def _not_json(feature) -> str | None:
    """What in a (nested) feature has no JSON form, or None."""
    from datasets import Json, LargeList, List, Value

    if isinstance(feature, dict):
        return next((p for p in map(_not_json, feature.values()) if p is not None), None)
    if isinstance(feature, (list, tuple)):
        return _not_json(feature[0])
    if isinstance(feature, (List, LargeList)):
        return _not_json(feature.feature)
    if isinstance(feature, Json):
        return None
    if hasattr(feature, "decode_example"):
        return f"{type(feature).__name__} data (decoded to Python objects, stored as bytes)"
    if isinstance(feature, Value) and feature.dtype.startswith(_NOT_JSON_DTYPES):
        return f"{feature.dtype} values"
    return None


def require_sized(source, what: str) -> int:
    if source.num_rows is None:
        raise TypeError(
            f"{what} needs a sized source; {source.name!r} is streaming: iterate it, or open it with streaming=False"
        )
    return source.num_rows
