"""The quarantine file ``{stem}.errors.jsonl``: one line per skipped row, with line and reason."""

from __future__ import annotations

from collections import Counter

import orjson

from pipeline_core.errors import BadRowError, RowError, RowLocation
from pipeline_core.io.fs import local_staging, remove_quietly


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
