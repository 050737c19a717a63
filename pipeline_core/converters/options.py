"""Column and tag remapping (LLaMA-Factory v0 ``columns`` / ``tags``) as typed, checked options."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields, replace
from typing import TypeVar

from pipeline_core.errors import ConfigError

T = TypeVar("T")


def override(defaults: T, mapping: Mapping[str, str] | None, what: str) -> T:
    """Return ``defaults`` with the names in mapping replaced (None: off); unknown keys are a ConfigError."""
    if not mapping:
        return defaults
    if not isinstance(mapping, Mapping):
        raise ConfigError(f"{what} must be a mapping of name -> name, got {type(mapping).__name__}")
    known = [f.name for f in fields(defaults)]
    unknown = sorted(set(mapping) - set(known))
    if unknown:
        raise ConfigError(f"unknown {what} key(s) {unknown}; expected some of {known}")
    _check_values(mapping, what)
    return replace(defaults, **mapping)


def _check_values(mapping: Mapping[str, str | None], what: str) -> None:
    """Names are non-empty strings; None turns a column or tag off (nothing is read for it)."""
    for key, value in mapping.items():
        if value is not None and (not isinstance(value, str) or not value):
            raise ConfigError(f"{what}[{key!r}] must be a non-empty string or null (off), got {value!r}")
