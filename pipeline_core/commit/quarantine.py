"""The quarantine file ``{stem}.errors.jsonl``: one line per skipped row, with line and reason.

``max_error_rate`` bounds the share of quarantined rows: a chunk over it fails (the quarantine file
is still written, so the reasons can be read) instead of publishing an output that silently lost
most of its data. The rate is checked once the whole chunk is read, so the verdict does not depend
on where in the file the bad rows sit.
"""

from __future__ import annotations

from collections import Counter

import orjson

from pipeline_core.errors import BadRowError, ConfigError, RowError, RowLocation
from pipeline_core.storage.fs import local_staging, remove_quietly


class ErrorRateExceeded(ValueError):
    """A chunk quarantined more rows than ``max_error_rate`` allows (not transient: never retried)."""


def check_max_error_rate(value: float | None) -> None:
    if value is not None and not 0 <= value <= 1:
        raise ConfigError(f"max_error_rate must be a share between 0 and 1 (0.01 = 1%), got {value!r}")


def error_rate_problem(source: str, skipped: int, rows: int, max_rate: float | None, reasons: dict) -> str | None:
    """The message when ``skipped / rows`` exceeds ``max_rate``; None when within (or no limit)."""
    if max_rate is None or rows == 0 or skipped / rows <= max_rate:
        return None
    return (
        f"{source}: {skipped} of {rows} rows quarantined ({skipped / rows:.2%}), over max_error_rate "
        f"{max_rate:.2%}; reasons {dict(sorted(reasons.items()))}. Fix the data, or raise max_error_rate"
    )


class ErrorLog:
    """Collects skipped rows under ``on_error='skip'``; raises the first one under ``'raise'``."""

    def __init__(self, source: str, on_error: str) -> None:
        if on_error not in ("skip", "raise"):
            raise ValueError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
        self.source = source
        self.on_error = on_error
        self.entries: list[dict] = []
        self.counts: Counter = Counter()

    def add(self, line: int, error: RowError) -> None:
        if self.on_error == "raise":
            raise BadRowError(RowLocation(self.source, line), error)
        self.counts[error.reason] += 1
        self.entries.append({"line": line, "reason": error.reason, "field": error.field, "message": error.message})

    def add_all(self, errors: list[tuple[int, RowError]]) -> None:
        for line, error in sorted(errors, key=lambda e: e[0]):
            self.add(line, error)

    def enforce_rate(self, rows: int, max_rate: float | None, url: str, storage_options: dict | None = None) -> None:
        """Raise ErrorRateExceeded when over ``max_rate``, after publishing the quarantine file at ``url``."""
        problem = error_rate_problem(self.source, sum(self.counts.values()), rows, max_rate, self.counts)
        if problem is None:
            return
        written = self.publish(url, storage_options)
        raise ErrorRateExceeded(f"{problem} (the quarantined rows are listed in {written})")

    def publish(self, url: str, storage_options: dict | None = None) -> str | None:
        """Write the errors file (atomically) or remove a stale one; the URL written, if any."""
        if not self.entries:
            remove_quietly(url, storage_options)
            return None
        self.entries.sort(key=lambda e: e["line"])
        with local_staging(url, storage_options) as tmp, open(tmp, "wb") as f:
            for entry in self.entries:
                f.write(orjson.dumps({"source": self.source, **entry}) + b"\n")
        return url
