"""Converters at export: raw rows -> the standard sample, with an ``on_error`` policy.

A row the converter rejects (``RowError``) is not fatal under ``on_error="skip"``: it becomes a
``RowFailure`` (dataset, row index, reason, field) that the export counts and writes to the chunk's
errors file. Under ``"raise"`` it stops the export with a ``SourceRowError`` naming all of those.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Literal

from pipeline_core.converters import Converter, ConverterFactory
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.sources.base import Record

OnError = Literal["skip", "raise"]
ConverterSpec = Converter | str | tuple[str, Mapping[str, Any]] | None


@dataclass(frozen=True, slots=True)
class RowFailure:
    dataset: str
    index: int  # 0-based row index within the dataset
    reason: str
    field: str | None
    message: str

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)


class SourceRowError(ValueError):
    """A row its converter rejected, raised under ``on_error="raise"``."""

    def __init__(self, failure: RowFailure) -> None:
        field = f" field {failure.field!r}:" if failure.field else ""
        super().__init__(
            f"dataset {failure.dataset!r} row {failure.index}:{field} {failure.message} (reason: {failure.reason}); "
            "pass on_error='skip' to write rejected rows to the chunk's errors file and go on"
        )
        self.failure = failure


def check_on_error(on_error: str) -> OnError:
    if on_error not in ("skip", "raise"):
        raise ConfigError(f"on_error must be 'skip' or 'raise', got {on_error!r}")
    return on_error  # type: ignore[return-value]


def resolve_converter(spec: ConverterSpec) -> Converter | None:
    """None, a registered name, ``(name, options)`` or a ready converter callable."""
    if spec is None:
        return None
    if isinstance(spec, str):
        return ConverterFactory.create(spec)
    if isinstance(spec, tuple) and len(spec) == 2 and isinstance(spec[0], str):
        return ConverterFactory.create(spec[0], **dict(spec[1]))
    if callable(spec):
        return spec
    raise ConfigError(f"converter must be a name, (name, options) or a callable, got {spec!r}")


def converter_label(converter: Converter | None) -> str | None:
    """A stable description for fingerprints: a dataclass converter's repr shows its options."""
    if converter is None:
        return None
    if dataclasses.is_dataclass(converter):
        return f"{type(converter).__module__}:{converter!r}"
    named = converter if hasattr(converter, "__qualname__") else type(converter)
    return f"{named.__module__}.{named.__qualname__}"


def convert_row(record: Record, converter: Converter | None, on_error: OnError) -> dict | RowFailure:
    """The record's row as a standard sample, or the failure when the converter rejects it."""
    if converter is None:
        return record.row
    try:
        return dict(converter(record.row))
    except RowError as error:
        failure = RowFailure(record.dataset, record.index, error.reason, error.field, error.message)
        if on_error == "raise":
            raise SourceRowError(failure) from error
        return failure
