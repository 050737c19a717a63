"""Small records describing what a stage wrote: kept in memory, logged, saved in manifests."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pipeline_core.sources.base import DatasetCounts


@dataclass(slots=True)
class CacheStats:
    """Counts of one cache_file run.

    Rows: ``rows_read = rows_written + rows_skipped``; a written row kept at least one sample, a
    skipped row none (one quarantine line each, its first reason, counted in ``skipped``). Samples:
    one per written row, or with ``rewritten="per_turn"`` one per trained turn, so
    ``samples_written >= rows_written``; a turn dropped from a written row is counted in ``dropped``
    (and has its own quarantine line). ``rows_truncated`` counts samples cut to max_length.
    """

    input_url: str = ""
    output_url: str = ""
    errors_url: str | None = None
    source_sha256: str = ""
    rows_read: int = 0
    rows_written: int = 0  # rows that kept at least one sample
    samples_written: int = 0
    skipped: Counter = field(default_factory=Counter)  # reason -> rows that kept no sample
    dropped: Counter = field(default_factory=Counter)  # reason -> samples dropped from written rows
    rows_truncated: int = 0
    tokens_written: int = 0
    pack_size: int = 0
    packs: int = 0
    pad_tokens: int = 0
    seconds: float = 0.0
    output_format: str = "hdf5"
    packing: str = "none"  # "concat" or "bfd" when packed
    lower_bound_packs: int = 0  # ceil(packed tokens / pack_size): no packer can use fewer packs
    pack_truncated: int = 0  # samples cut to pack_size by bfd (overflow='truncate')
    untrained_packs: int = 0  # packs whose loss mask is all False (concat; see packing.stage.ConcatStage)
    sentences_written: int = 0  # with split_sentences
    deferred_keys: list[str] = field(default_factory=list)  # deferred keys kept in the HDF5 (fractional)
    megatron_keys: list[str] = field(default_factory=list)
    megatron_prefixes: dict[str, str] = field(default_factory=dict)  # file key -> {stem}_{key}_{level} URL

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def samples_dropped(self) -> int:
        return sum(self.dropped.values())

    @property
    def pack_fill(self) -> float | None:
        """Share of packed positions holding real tokens; None when not packed."""
        return 1 - self.pad_tokens / (self.packs * self.pack_size) if self.packs else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["pack_fill"] = self.pack_fill
        d["skipped"] = dict(sorted(self.skipped.items()))
        d["rows_skipped"] = self.rows_skipped
        d["dropped"] = dict(sorted(self.dropped.items()))
        d["samples_dropped"] = self.samples_dropped
        return d


@dataclass(slots=True)
class ExportStats:
    """Counts of one exported chunk. rows_out may exceed rows_in with a one-to-many process_func.

    Every row read is written, filtered or failed: rows_failed counts those the converter rejected
    and those whose output held NaN or Infinity (``non_finite_number``: seen by the process_func,
    then not written) or a value JSON cannot hold (``unencodable_value``); rows_filtered those for which it returned None or [].
    """

    index: int
    output_url: str
    rows_in: int = 0
    rows_out: int = 0
    rows_filtered: int = 0  # rows for which process_func returned None or []
    sha256: str = ""
    size: int = 0
    failed: Counter = field(default_factory=Counter)  # reason -> rows not written (converter, non-finite)
    errors_url: str | None = None  # {prefix}_chunk_{i}.errors.jsonl when rows were rejected
    dataset_rows: Counter = field(default_factory=Counter)  # dataset -> rows read
    dataset_failed: Counter = field(default_factory=Counter)  # dataset -> rows rejected

    @property
    def rows_failed(self) -> int:
        return sum(self.failed.values())

    def to_dict(self) -> dict:
        d = asdict(self)
        for key in ("failed", "dataset_rows", "dataset_failed"):
            d[key] = dict(sorted(getattr(self, key).items()))
        d["rows_failed"] = self.rows_failed
        return d


@dataclass(slots=True)
class ExportResult:
    """One export run: its chunks in order and the per-dataset counts (planned and read)."""

    source: str
    chunks: list[ExportStats]
    datasets: dict[str, DatasetCounts]

    @property
    def urls(self) -> list[str]:
        return [c.output_url for c in self.chunks]

    @property
    def rows_in(self) -> int:
        return sum(c.rows_in for c in self.chunks)

    @property
    def rows_out(self) -> int:
        return sum(c.rows_out for c in self.chunks)

    @property
    def rows_filtered(self) -> int:
        return sum(c.rows_filtered for c in self.chunks)

    @property
    def failed(self) -> Counter:
        return sum((c.failed for c in self.chunks), Counter())

    @property
    def rows_failed(self) -> int:
        return sum(self.failed.values())

    def to_dict(self) -> dict:
        return {
            "source": self.source,
            "rows_in": self.rows_in,
            "rows_out": self.rows_out,
            "rows_filtered": self.rows_filtered,
            "rows_failed": self.rows_failed,
            "failed": dict(sorted(self.failed.items())),
            "datasets": {name: counts.to_dict() for name, counts in self.datasets.items()},
            "chunks": [c.to_dict() for c in self.chunks],
        }
