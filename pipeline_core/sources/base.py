"""The contract between a source and the export stage: ``Record``, ``DatasetCounts`` and ``Source``.

A source yields ``Record``s: a raw row plus the dataset it came from and its 0-based index in that
dataset, so a bad row can be reported as "dataset 'alpaca', row 12". Rows are yielded as stored
(read through Arrow by ``datasets``); converters are applied by the export stage, which owns the
``on_error`` policy.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from dataclasses import asdict, dataclass
from typing import Any, Protocol

from pipeline_core.converters import Converter


@dataclass(frozen=True, slots=True)
class Record:
    dataset: str  # the dataset's name (its dataset_info entry, or the source's name)
    index: int  # 0-based row index within that dataset, before any sampling
    row: dict[str, Any]


@dataclass(slots=True)
class DatasetCounts:
    """Rows of one dataset in a source. ``rows_read``/``rows_failed`` are filled in by the export."""

    name: str
    rows_available: int | None = None  # rows it offers: all, or ``size`` when it has more; None: not counted
    rows_taken: int | None = None  # rows of the output drawn from it, repeats included
    rows_upsampled: int = 0  # of rows_taken, the repeats beyond one pass over the data
    weight: float | None = None
    rows_read: int = 0
    rows_failed: int = 0  # not written: rejected by the converter, or holding NaN/Infinity

    def to_dict(self) -> dict:
        return asdict(self)


class Source(Protocol):
    """Rows to export. Sized sources (``num_rows`` set) can be read from any position."""

    name: str
    num_rows: int | None
    converters: Mapping[str, Converter | None]  # by dataset name; None: rows pass through

    @property
    def fingerprint(self) -> str:
        """Stable across runs and processes; changes when the rows would change."""
        ...

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]: ...

    def iter_rows(self, start: int, stop: int) -> Iterator[dict]: ...

    def __iter__(self) -> Iterator[dict]: ...

    def summary(self) -> dict[str, DatasetCounts]:
        """Per-dataset counts (a fresh copy each call)."""
        ...
