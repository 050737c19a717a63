"""Errors shared by the core: bad rows and bad configuration.

A bad row is reported with where it came from (file, line) and which field is wrong, so the
user can fix the data; a bad config says which setting to change.
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass


class ConfigError(ValueError):
    """An impossible configuration. The message says which setting to change."""


class SourceError(ValueError):
    """A source file its reader cannot parse. The message names the file and line and the fix."""


class RowError(ValueError):
    """A row that cannot become a sample. `reason` is a short stable key used for counting."""

    def __init__(
        self, reason: str, message: str, field: str | None = None, turn: tuple[int, int] | None = None
    ) -> None:
        super().__init__(message)
        self.reason = reason
        self.field = field
        self.message = message
        self.turn = turn  # (k, n): the sample is trained turn k of the n its row made (rewritten="per_turn")


@dataclass(frozen=True, slots=True)
class RowLocation:
    file: str
    line: int  # 1-based line number in the source file

    def __str__(self) -> str:
        return f"{self.file}:{self.line}"


class BadRowError(ValueError):
    """Raised under on_error="raise": a RowError with the file and line it came from."""

    def __init__(self, where: RowLocation, error: RowError) -> None:
        field = f" field {error.field!r}:" if error.field else ""
        super().__init__(f"{where}:{field} {error.message} (reason: {error.reason})")
        self.where = where
        self.error = error


def error_chain(error: BaseException | None) -> Iterator[BaseException]:
    """``error``, then what caused it (``__cause__``, else ``__context__``), and so on; each once."""
    seen = set()
    while error is not None and id(error) not in seen:
        seen.add(id(error))
        yield error
        error = error.__cause__ or error.__context__
