"""Prompt strategies: the format tokens wrapped around a query and its response.

A strategy is four token runs, encoded once at construction::

    prompt   = prompt_prefix + query + prompt_suffix      (loss off)
    response = response + response_suffix                (loss on)

``assemble_prompt`` / ``assemble_response`` apply them to one sample; the ``*_batch`` forms apply
them to a whole Ragged batch with numpy, which is the path the cache stage takes.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.ragged import Ragged, concat_ragged, tile_rows
from pipeline_core.tokenizer import EOS_TOKEN, AutoTokenizer


class PromptStrategy(ABC):
    """Format tokens around query and response. Subclasses set the four runs in __init__."""

    def __init__(self, tokenizer: AutoTokenizer) -> None:
        self.tokenizer = tokenizer
        self.prompt_prefix = np.zeros(0, dtype=np.int32)
        self.prompt_suffix = np.zeros(0, dtype=np.int32)
        self.response_suffix = np.zeros(0, dtype=np.int32)

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def format_strings(self) -> dict[str, str]:
        """The strategy's parameters as written, for output metadata."""

    def _encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode_markup(text), dtype=np.int32)

    def assemble_prompt(self, query_tokens: Sequence[int]) -> list[int]:
        return [*self.prompt_prefix.tolist(), *query_tokens, *self.prompt_suffix.tolist()]

    def assemble_response(self, response_tokens: Sequence[int]) -> list[int]:
        return [*response_tokens, *self.response_suffix.tolist()]

    def assemble_prompt_batch(self, queries: Ragged) -> Ragged:
        n = len(queries)
        return concat_ragged([tile_rows(self.prompt_prefix, n), queries, tile_rows(self.prompt_suffix, n)])

    def assemble_response_batch(self, responses: Ragged) -> Ragged:
        return concat_ragged([responses, tile_rows(self.response_suffix, len(responses))])


class ChatMLStrategy(PromptStrategy):
    def __init__(
        self,
        tokenizer: AutoTokenizer,
        user_start: str = "<｜im▁start｜>user\n",
        user_end: str = "<｜im▁end｜>\n",
        assistant_start: str = "<｜im▁start｜>assistant\n",
        assistant_end: str = "<｜im▁end｜>\n",
    ) -> None:
        super().__init__(tokenizer)
        self.user_start, self.user_end = user_start, user_end
        self.assistant_start, self.assistant_end = assistant_start, assistant_end
        self.prompt_prefix = self._encode(user_start)
        self.prompt_suffix = self._encode(user_end + assistant_start)
        self.response_suffix = self._encode(assistant_end)

    @property
    def name(self) -> str:
        return "chatml"

    def format_strings(self) -> dict[str, str]:
        return {
            "user_start": self.user_start,
            "user_end": self.user_end,
            "assistant_start": self.assistant_start,
            "assistant_end": self.assistant_end,
        }


class AlpacaStrategy(PromptStrategy):
    def __init__(
        self,
        tokenizer: AutoTokenizer,
        instruction_start: str = "### Instruction:\n",
        instruction_end: str = "\n\n",
        response_start: str = "### Response:\n",
        response_suffix: str = EOS_TOKEN,
    ) -> None:
        super().__init__(tokenizer)
        self.instruction_start, self.instruction_end = instruction_start, instruction_end
        self.response_start, self.response_suffix_text = response_start, response_suffix
        self.prompt_prefix = self._encode(instruction_start)
        self.prompt_suffix = self._encode(instruction_end + response_start)
        self.response_suffix = self._encode(response_suffix)

    @property
    def name(self) -> str:
        return "alpaca"

    def format_strings(self) -> dict[str, str]:
        return {
            "instruction_start": self.instruction_start,
            "instruction_end": self.instruction_end,
            "response_start": self.response_start,
            "response_suffix": self.response_suffix_text,
        }


class StrategyFactory:
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


StrategyFactory.register("chatml", ChatMLStrategy)
StrategyFactory.register("alpaca", AlpacaStrategy)
