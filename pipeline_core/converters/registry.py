"""Converters by name: ``ConverterFactory.create("sharegpt", tags={...})``.

A registered entry is anything that, called with the converter's options, returns a
``Converter``: a class whose ``__init__`` takes the options, or a factory function. Options are
checked against its signature when the converter is created, so a misspelt option fails at
configuration time and not on the first row.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable, Mapping
from typing import Any, ClassVar, Protocol, TypeVar

from pipeline_core.errors import ConfigError


class Converter(Protocol):
    """Turns one raw row into one standard sample; raises RowError for a bad row."""

    def __call__(self, row: Mapping[str, Any]) -> Mapping[str, Any]: ...


ConverterMaker = Callable[..., Converter]
M = TypeVar("M", bound=ConverterMaker)


class ConverterFactory:
    _makers: ClassVar[dict[str, ConverterMaker]] = {}

    @classmethod
    def register(cls, name: str, *aliases: str) -> Callable[[M], M]:
        """Decorator registering a converter class or factory function under name (and aliases)."""

        def decorate(maker: M) -> M:
            for key in (name, *aliases):
                cls._add(key, maker)
            return maker

        return decorate

    @classmethod
    def create(cls, name: str, **options: Any) -> Converter:
        maker = cls._makers.get(name)
        if maker is None:
            raise ConfigError(f"unknown converter {name!r}; registered converters: {', '.join(cls.names())}")
        _check_options(name, maker, options)
        return maker(**options)

    @classmethod
    def names(cls) -> tuple[str, ...]:
        return tuple(sorted(cls._makers))

    @classmethod
    def _add(cls, key: str, maker: ConverterMaker) -> None:
        existing = cls._makers.get(key)
        if existing is not None and existing is not maker:
            raise ConfigError(f"converter name {key!r} is already registered to {existing!r}")
        cls._makers[key] = maker


def _check_options(name: str, maker: ConverterMaker, options: Mapping[str, Any]) -> None:
    signature = inspect.signature(maker)
    try:
        signature.bind(**options)
    except TypeError as exc:
        accepted = ", ".join(signature.parameters) or "none"
        raise ConfigError(f"bad options for converter {name!r}: {exc}; accepted options: {accepted}") from None
