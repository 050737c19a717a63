"""Small records describing what a stage wrote: kept in memory, logged, saved in manifests."""

from __future__ import annotations

from collections import Counter
from dataclasses import asdict, dataclass, field


@dataclass(slots=True)
class CacheStats:
    """Counts of one cache_file run. rows_read = samples_written + rows_skipped."""

    input_url: str = ""
    output_url: str = ""
    errors_url: str | None = None
    source_sha256: str = ""
    rows_read: int = 0
    samples_written: int = 0
    skipped: Counter = field(default_factory=Counter)
    rows_truncated: int = 0
    tokens_written: int = 0
    pack_size: int = 0
    packs: int = 0
    pad_tokens: int = 0
    seconds: float = 0.0

    @property
    def rows_skipped(self) -> int:
        return sum(self.skipped.values())

    @property
    def pack_fill(self) -> float | None:
        """Share of packed positions holding real tokens; None when not packed."""
        return 1 - self.pad_tokens / (self.packs * self.pack_size) if self.packs else None

    def to_dict(self) -> dict:
        d = asdict(self)
        d["pack_fill"] = self.pack_fill
        d["skipped"] = dict(sorted(self.skipped.items()))
        d["rows_skipped"] = self.rows_skipped
        return d


@dataclass(slots=True)
class ExportStats:
    """Counts of one exported chunk. rows_out may exceed rows_in with a one-to-many process_func."""

    index: int
    output_url: str
    rows_in: int = 0
    rows_out: int = 0
    rows_filtered: int = 0  # rows for which process_func returned None or []
    sha256: str = ""
    size: int = 0

    def to_dict(self) -> dict:
        return asdict(self)
