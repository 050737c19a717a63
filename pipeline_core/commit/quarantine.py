"""The quarantine file ``{stem}.errors.jsonl``: one line per skipped row, with line and reason.

``max_error_rate`` bounds the share of quarantined rows: a chunk over it fails (the quarantine file
is still written, so the reasons can be read) instead of publishing an output that silently lost
most of its data. The rate is checked once the whole chunk is read, so the verdict does not depend
on where in the file the bad rows sit.
"""

from __future__ import annotations

import shutil
import tempfile
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
        self.counts: Counter = Counter()
        self._spool = None  # a local temporary file, one JSON line per skipped row, in line order
        self._last_line = -1
        self._in_order = True

    def add(self, line: int, error: RowError) -> None:
        if self.on_error == "raise":
            raise BadRowError(RowLocation(self.source, line), error)
        self.counts[error.reason] += 1
        entry = {"source": self.source, "line": line, "reason": error.reason, "field": error.field}
        if error.turn is not None:  # one of several samples of the line (rewritten="per_turn")
            entry["turn"], entry["turns"] = error.turn
        entry["message"] = error.message
        self._write(line, orjson.dumps(entry) + b"\n")

    def add_all(self, errors: list[tuple[int, RowError]]) -> None:
        """Add a batch's errors (sorted here; batches come in line order, so the file is too)."""
        for line, error in sorted(errors, key=lambda e: e[0]):
            self.add(line, error)

    def _write(self, line: int, data: bytes) -> None:
        """Streamed to disk: memory stays bounded however many rows are rejected."""
        if self._spool is None:
            self._spool = tempfile.TemporaryFile(prefix="h5pipe-quarantine-")  # noqa: SIM115 - closed by close()
        self._in_order = self._in_order and line >= self._last_line
        self._last_line = max(self._last_line, line)
        self._spool.write(data)

    def publish(self, url: str, storage_options: dict | None = None) -> str | None:
        """Write the errors file (atomically) or remove a stale one; the URL written, if any."""
        if self._spool is None:
            remove_quietly(url, storage_options)
            return None
        self._spool.flush()
        self._spool.seek(0)
        with local_staging(url, storage_options) as tmp, open(tmp, "wb") as f:
            if self._in_order:
                shutil.copyfileobj(self._spool, f, 1 << 20)
            else:  # rows added out of line order (not the cache stage's way): sorted in memory
                f.writelines(sorted(self._spool, key=lambda raw: orjson.loads(raw)["line"]))
        self._spool.seek(0, 2)
        return url

    def close(self) -> None:
        if self._spool is not None:
            self._spool.close()
            self._spool = None
