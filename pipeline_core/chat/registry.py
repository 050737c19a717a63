"""The registry of prompt strategies, by name: what ``--strategy`` and a YAML's ``strategy`` name."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pipeline_core.errors import ConfigError

if TYPE_CHECKING:
    from pipeline_core.chat.prompt import PromptStrategy
    from pipeline_core.tokenizer.auto import AutoTokenizer


class StrategyFactory:
    """The registry of prompt strategies: ``StrategyFactory.create("chatml", tokenizer, **kwargs)``.

    Built in: ``chatml``, ``alpaca`` and ``template`` (the tokenizer's own chat template). An unknown
    name or a wrong keyword is a ``ConfigError`` listing what is registered; register another with
    ``@StrategyFactory.register("name")`` on a ``PromptStrategy`` subclass.
    """

    _registry: dict[str, type[PromptStrategy]] = {}

    @classmethod
    def register(cls, name: str, strategy_cls: type[PromptStrategy] | None = None):
        """Register a strategy class; usable directly or as a class decorator."""

        def add(klass: type[PromptStrategy]) -> type[PromptStrategy]:
            cls._registry[name] = klass
            return klass

        return add(strategy_cls) if strategy_cls is not None else add

    @classmethod
    def create(cls, name: str, tokenizer: AutoTokenizer, **kwargs) -> PromptStrategy:
        if name not in cls._registry:
            raise ConfigError(f"unknown strategy {name!r}; registered strategies: {', '.join(sorted(cls._registry))}")
        try:
            return cls._registry[name](tokenizer, **kwargs)
        except TypeError as e:
            raise ConfigError(f"strategy {name!r}: {e}") from e

    @classmethod
    def names(cls) -> list[str]:
        return sorted(cls._registry)
