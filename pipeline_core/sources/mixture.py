"""Several datasets (the entries of a dataset_info file) as one Source, mixed by a seeded plan.

Each entry contributes LLaMA-Factory v1's count of rows, ``size`` (else its rows) times ``weight``
(else 1), truncated; a ``total`` rescales those counts (see ``mixing``). It takes them from the
rows it offers: all of them, the first ``size``, or with ``shuffle: true`` a seeded sample of
``size`` without replacement (their file order is kept; ``shuffle`` only changes which rows
``size`` picks). A ``size`` beyond the rows offers them all, and the count repeats some (counted).
Planning a streaming dataset needs its row count: it is counted with one extra pass (bounded by
``size`` when that is set), except for a lone streaming entry with no ``size``, ``weight`` or
``total``, which is simply read through.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from itertools import islice

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.sources.base import DatasetCounts, Record
from pipeline_core.sources.dataset_info import DatasetEntry
from pipeline_core.sources.fingerprint import digest
from pipeline_core.sources.mixing import POOL, SELECT, Interleave, Selection, Subset, lf_count, mix_counts
from pipeline_core.sources.single import ROW_BATCH, DatasetSource, RowsFromRecords

log = logging.getLogger(__name__)
MAX_ROWS = 2**62  # positions are int64
MIX_VERSION = 2  # bump when the plan for the same inputs changes (2: LLaMA-Factory v1 counts)


@dataclass(slots=True)
class Part:
    """One entry of the mixture: the ``rows`` it offers (the ``pool`` subset of its rows, or None for
    the first ``rows``; fewer than ``size`` when the data has fewer) and, once planned, its
    ``selection`` of them."""

    entry: DatasetEntry
    source: DatasetSource
    rows: int | None = None
    pool: Subset | None = None
    selection: Selection | None = None

    def indices(self, positions: np.ndarray) -> np.ndarray:
        """Dataset row indices of positions in the offer (any order)."""
        if self.pool is None:
            return positions
        unique, inverse = np.unique(positions, return_inverse=True)
        return self.pool.at(unique)[inverse]


class MixtureSource(RowsFromRecords):
    def __init__(self, parts: Sequence[Part], *, name: str, seed: int = 0, total: int | None = None) -> None:
        if not parts:
            raise ConfigError(f"{name}: no datasets to mix")
        self.name, self.parts, self.seed, self.total = name, list(parts), seed, total
        self.not_loadable: dict[str, str] = {}  # set by open_source: unselected entries it could not load
        self.converters = {p.entry.name: p.source.converters[p.source.name] for p in self.parts}
        planned = len(self.parts) > 1 or total is not None or _counted(self.parts[0].entry)
        for i, part in enumerate(self.parts):
            offer(part, seed, i, count_streams=planned)
        self.interleave = self._plan() if all(p.rows is not None for p in self.parts) else None
        sized = self.interleave is not None and all(not p.source.streaming for p in self.parts)
        self.num_rows: int | None = self.interleave.total if sized else None

    @property
    def fingerprint(self) -> str:
        entries = [
            [p.entry.name, p.source.fingerprint, p.entry.size, p.entry.shuffle, p.entry.weight] for p in self.parts
        ]
        return digest("mixture", MIX_VERSION, self.seed, self.total, entries)

    def records(self, start: int = 0, stop: int | None = None) -> Iterator[Record]:
        if self.interleave is None:  # a lone streaming entry without size or weight: read through
            return self.parts[0].source.records(start, stop)
        return self._mixed(start, self.interleave.total if stop is None else stop)

    def summary(self) -> dict[str, DatasetCounts]:
        return {p.entry.name: _counts(p) for p in self.parts}

    def _plan(self) -> Interleave:
        rows = [p.rows for p in self.parts]
        sizes = [p.entry.size for p in self.parts]
        counts = mix_counts(rows, sizes=sizes, weights=[p.entry.weight for p in self.parts], total=self.total)
        if sum(counts) > MAX_ROWS:
            raise ConfigError(f"{self.name}: the mixture would hold {sum(counts):,} rows; lower weight, size or total")
        for i, (part, count) in enumerate(zip(self.parts, counts)):
            _check_count(part, count, self.total)
            part.selection = Selection.draw(part.rows, count, (self.seed, SELECT, i))
        return Interleave(counts, self.seed)

    def _mixed(self, start: int, stop: int) -> Iterator[Record]:
        consumed = self.interleave.consumed_before(start)
        streams = [_selected(p, int(consumed[i])) for i, p in enumerate(self.parts)]
        for ids in self.interleave.ids(start, stop):
            for i in ids.tolist():
                record = next(streams[i], None)
                if record is None:
                    raise RuntimeError(
                        f"dataset {self.parts[i].entry.name!r} ran out of rows; did it change during the export?"
                    )
                yield record


def offer(part: Part, seed: int, index: int, *, count_streams: bool) -> None:
    """Set ``part.rows``/``part.pool`` from ``size`` and ``shuffle`` (counting a stream if needed).
    A ``size`` beyond the rows offers them all; the plan then repeats rows to reach the count."""
    size, length = part.entry.size, part.source.num_rows
    sampled = part.entry.shuffle and size is not None
    if length is None and (count_streams or sampled):
        length = count_rows(part.source, None if sampled else size)
    if length is None:
        return
    if sampled and size < length:
        part.rows, part.pool = size, Subset.draw(length, size, (seed, POOL, index))
    else:
        part.rows = length if size is None else min(size, length)


def count_rows(source: DatasetSource, limit: int | None) -> int:
    if limit is None:
        log.warning("counting the rows of streaming dataset %r (one extra pass); set size to bound it", source.name)
    return sum(1 for _ in islice(source.records(), limit))


def _counted(entry: DatasetEntry) -> bool:
    """Whether a lone entry's row count matters (else a stream is read through as it is)."""
    return entry.size is not None or entry.weight is not None


def _check_count(part: Part, count: int, total: int | None) -> None:
    """Refuse a count from no rows; say when a dataset gives none of its rows or repeats some."""
    name, why = part.entry.name, _arithmetic(part, total)
    if count and not part.rows:
        raise ConfigError(
            f"dataset {name!r} has no rows but is to give {count} ({why}); remove it from the dataset_info or its size"
        )
    if not part.rows:
        log.warning("dataset %r has no rows", name)
    elif not count:
        log.warning("dataset %r gives none of its %d rows (%s); raise its weight to include it", name, part.rows, why)
    elif count > part.rows:
        repeats = count - part.rows
        log.warning(
            "dataset %r: %d of the %d rows it gives are repeats (%s, from %d rows)",
            name,
            repeats,
            count,
            why,
            part.rows,
        )


def _arithmetic(part: Part, total: int | None) -> str:
    """How the count came about, as LLaMA-Factory v1 computes it: "int(size 250 x weight 0.5) = 125"."""
    entry = part.entry
    text = f"size {entry.size}" if entry.size is not None else f"{part.rows} rows"
    if entry.weight is not None:
        text = f"int({text} x weight {entry.weight}) = {lf_count(part.rows, entry.size, entry.weight)}"
    return text if total is None else f"{text}, rescaled to total={total}"


def _selected(part: Part, offset: int) -> Iterator[Record]:
    """The part's selected records from selection item ``offset`` on."""
    if part.source.streaming:
        return islice(_streamed(part), offset, None)
    return _taken(part, offset)


def _taken(part: Part, offset: int) -> Iterator[Record]:
    count = part.selection.count
    for lo in range(offset, count, ROW_BATCH):
        yield from part.source.take(part.indices(part.selection.positions(lo, min(lo + ROW_BATCH, count))))


def _streamed(part: Part) -> Iterator[Record]:
    """Pass after pass over the stream, each keeping the wanted rows (read front to back)."""
    for _ in range(part.selection.passes):
        pool_rows = None if part.pool is None else iter(part.pool)
        yield from _pick(part.source.records(), pool_rows, part.rows)
    if part.selection.extra.count:
        extra = (part.indices(block) for block in part.selection.extra)
        yield from _pick(part.source.records(), extra, None)


def _pick(records: Iterator[Record], wanted: Iterator[np.ndarray] | None, limit: int | None) -> Iterator[Record]:
    """Records whose index is in ``wanted`` (ascending arrays), or the first ``limit``; stops reading early."""
    if wanted is None:
        yield from islice(records, limit)
        return
    targets = (i for block in wanted for i in block.tolist())
    target = next(targets, None)
    for record in records:
        if target is None:
            return
        if record.index == target:
            yield record
            target = next(targets, None)


def _counts(part: Part) -> DatasetCounts:
    selection = part.selection
    return DatasetCounts(
        part.entry.name,
        rows_available=part.rows,
        rows_taken=selection.count if selection else None,
        rows_upsampled=selection.upsampled if selection else 0,
        weight=part.entry.weight,
    )
