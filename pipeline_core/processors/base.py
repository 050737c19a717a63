"""The processor contract: rows in, token sequences out, bad rows reported, never dropped.

``process_batch`` is the path the cache stage uses: it validates every row, encodes all texts of
the batch in one tokenizer call and assembles the samples with numpy. ``process`` is the same on
one row, returning torch tensors.

Keys: ``groups`` maps each length key to the keys aligned with it token for token;
``sample_keys`` are stored one value per sample (not per token, so never packed with the tokens);
``deferred_keys`` are aligned keys worth storing only when informative: a ``loss_weight`` whose
values are all 0 or 1 repeats the loss mask, so a writer may leave it out (``process`` does).
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import ClassVar, Literal

import numpy as np

from pipeline_core.chat.prompt import PromptStrategy
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer.auto import AutoTokenizer

Overflow = Literal["drop", "truncate"]


@dataclass(slots=True)
class ProcessedBatch:
    """Samples of the rows that made it, and why the others did not.

    ``samples[key]`` holds one sequence per kept row; ``rows`` are the kept rows' positions in the
    input batch, ``errors`` the skipped ones with their reason. ``turns``: when a row made several
    samples (``rewritten="per_turn"``), each kept sample's turn and its row's number of samples
    (``processors/turns.py``), so a sample dropped later (packing) is named by its turn.
    """

    samples: dict[str, Ragged]
    rows: np.ndarray
    errors: list[tuple[int, RowError]] = field(default_factory=list)
    truncated: int = 0
    turns: np.ndarray | None = None
    # per kept sample, the tokens before its answer (None: the first loss_mask token's position);
    # packing's cut to pack_size keeps them whole (packing/stage.py ``fit_batch``)
    prompt_lengths: np.ndarray | None = None

    @property
    def n_samples(self) -> int:
        return len(self.rows)


class Processor(ABC):
    """Turns a batch of rows into token sequences and their aligned keys; the unit the cache stage runs.

    ``process_batch(rows)`` returns a ``ProcessedBatch``: a ``Ragged`` per output key (``sequence``
    and its ``loss_mask`` for sft, ``chosen``/``rejected`` and their masks for dpo) plus the rows
    that could not become samples, each with a reason. ``groups`` declares which keys are aligned
    token for token, so packing and writing keep them in lockstep. Subclasses register with
    ``ProcessorFactory.register("type")``.
    """

    type: ClassVar[str]
    # each group is a length key followed by the keys aligned with it (same length per sample)
    groups: ClassVar[dict[str, tuple[str, ...]]]
    deferred_keys: ClassVar[tuple[str, ...]] = ()  # aligned keys kept only when informative
    # deferred key -> the key it repeats when not informative (loss_weight all 0/1 is loss_mask)
    deferred_stand_ins: ClassVar[dict[str, str]] = {}
    sample_keys: tuple[str, ...] = ()  # one value per sample, e.g. media references
    # several groups are the parts of one sample that share a pack (a DPO pair); else groups are
    # tokenized apart (pt's text_keys) and cannot be packed into one sequence
    paired: ClassVar[bool] = False
    # process_batch may run on two batches at once in threads (the cache stage then encodes ahead):
    # only for a processor that keeps no state between batches. Not inherited (__init_subclass__):
    # a subclass that adds state of its own must not run concurrently because its base could.
    concurrent_batches: ClassVar[bool] = False

    def __init__(
        self,
        tokenizer: AutoTokenizer,
        strategy: PromptStrategy | None = None,
        normalizer: Callable[[str], str] | None = None,
        max_length: int | None = None,
        overflow: Overflow = "drop",
    ) -> None:
        if max_length is not None and max_length <= 0:
            raise ConfigError(f"max_length must be positive, got {max_length}; omit it for no limit")
        if overflow not in ("drop", "truncate"):
            raise ConfigError(f"overflow must be 'drop' or 'truncate', got {overflow!r}")
        self.tokenizer = tokenizer
        self.strategy = strategy
        self.normalizer = normalizer
        self.max_length = max_length
        self.overflow = overflow

    def __init_subclass__(cls, **kwargs) -> None:
        super().__init_subclass__(**kwargs)
        if "concurrent_batches" not in cls.__dict__:
            cls.concurrent_batches = False

    @abstractmethod
    def process_batch(self, rows: list[dict]) -> ProcessedBatch: ...

    def process(self, input_dict: dict) -> dict:
        """One row -> {key: 1-D torch tensor}; a bad row raises its RowError."""
        import torch

        batch = self.process_batch([input_dict])
        if batch.errors:
            raise batch.errors[0][1]
        return {
            k: torch.from_numpy(r[0].copy())
            for k, r in batch.samples.items()
            if k not in self.deferred_keys or informative(r.values)
        }

    @property
    def keys(self) -> list[str]:
        return [k for keys in self.groups.values() for k in keys] + list(self.sample_keys)

    def describe(self) -> dict:
        """Settings recorded in output attributes and cache keys."""
        return {
            "processor": self.type,
            "strategy": self.strategy.name if self.strategy else None,
            "strategy_tokens": self.strategy.format_strings() if self.strategy else {},
            "normalizer": getattr(self.normalizer, "describe", lambda: None)(),
            **({"normalizer_rules": note} if (note := getattr(self.normalizer, "rule_note", None)) else {}),
            "max_length": self.max_length,
            "overflow": self.overflow,
        }


def informative(weights: np.ndarray) -> bool:
    """True when some weight is neither 0 nor 1, i.e. the weights say more than the mask."""
    return bool(np.any((weights != 0) & (weights != 1)))


def assemble(
    samples: dict[str, Ragged],
    positions: np.ndarray,
    errors: list[tuple[int, RowError]],
    dropped: list[tuple[int, RowError]],
    keep: np.ndarray,
    truncated: int,
    turns: np.ndarray | None = None,
    prompt_lengths: np.ndarray | None = None,
) -> ProcessedBatch:
    """The batch of kept samples; ``dropped`` holds over-length errors by position among the good rows."""
    errors = errors + [(int(positions[i]), e) for i, e in dropped]
    kept = {k: v.keep(keep) for k, v in samples.items()}
    kept_turns = None if turns is None else turns[keep]
    prompts = None if prompt_lengths is None else prompt_lengths[keep]
    return ProcessedBatch(kept, positions[keep], sorted(errors, key=lambda x: x[0]), truncated, kept_turns, prompts)


def require_text(row: dict, key: str) -> str:
    """The non-empty string at ``row[key]``, or a RowError naming the field."""
    if not isinstance(row, dict):
        raise RowError("not_an_object", f"row is a {type(row).__name__}, expected a JSON object")
    if key not in row or row[key] is None:
        raise RowError("missing_field", f"missing field {key!r}; row has {sorted(row)}", key)
    value = row[key]
    if not isinstance(value, str):
        raise RowError("wrong_type", f"field {key!r} is a {type(value).__name__}, expected a string", key)
    if is_blank(value):
        raise RowError("empty_text", f"field {key!r} is empty", key)
    return value


def normalized_text(row: dict, key: str, normalize: Callable[[str], str] | None = None) -> str:
    """``require_text``, then ``normalize``: a text the normalizer leaves blank is ``empty_text``
    too, as the raw text would be (it was written as an empty sample, or an empty answer)."""
    text = require_text(row, key)
    if normalize is None:
        return text
    text = normalize(text)
    if is_blank(text):
        raise RowError("empty_text", f"field {key!r} is empty once normalized (the normalizer's rules removed it)", key)
    return text


def plain_texts(rows: list, key: str) -> list[str] | None:
    """``[require_text(row, key) for row in rows]`` when every row passes it, with no Python call
    per row; None when some row does not (take the row-by-row path then, for its reasons)."""
    try:
        texts = [row[key] for row in rows]
    except (KeyError, TypeError, IndexError):
        return None
    if all(type(t) is str and t and not t.isspace() for t in texts):
        return texts
    return None


def is_blank(text: str) -> bool:
    """Empty or whitespace only: ``not text.strip()`` without copying the text."""
    return not text or text.isspace()


def split_valid(rows: list[dict], extract: Callable[[dict], tuple]) -> tuple[list[tuple], np.ndarray, list]:
    """Apply ``extract`` to each row: (values of good rows, their positions, errors of bad rows)."""
    good, positions, errors = [], [], []
    for i, row in enumerate(rows):
        try:
            good.append(extract(row))
            positions.append(i)
        except RowError as e:
            errors.append((i, e))
    return good, np.asarray(positions, dtype=np.int64), errors


ProcessorClass = type[Processor]


class ProcessorFactory:
    """The registry of processors: ``ProcessorFactory.create("sft", tokenizer, strategy="chatml", **kwargs)``.

    Built in: ``pt`` (pretraining text), ``sft`` and ``dpo``; sft and dpo default to the chatml
    strategy, and ``strategy`` may be a strategy object or a registered name. An unknown type is
    a ``ConfigError`` that lists the registered ones.
    """

    _registry: dict[str, ProcessorClass] = {}

    @classmethod
    def register(cls, type_name: str):
        def add(klass: ProcessorClass) -> ProcessorClass:
            klass.type = type_name
            cls._registry[type_name] = klass
            return klass

        return add

    @classmethod
    def deferred_stand_ins(cls) -> dict[str, str]:
        """Every registered processor's deferred key -> the key whose values it then repeats."""
        return {k: v for klass in cls._registry.values() for k, v in klass.deferred_stand_ins.items()}

    @classmethod
    def _class(cls, type_name: str) -> ProcessorClass:
        if type_name not in cls._registry:
            raise ConfigError(
                f"unknown processor {type_name!r}; registered processors: {', '.join(sorted(cls._registry))}"
            )
        return cls._registry[type_name]

    @classmethod
    def create(cls, type_name: str, tokenizer: AutoTokenizer, **kwargs) -> Processor:
        """A processor with its default strategy (chatml for sft/dpo); ``kwargs`` go to the processor.

        ``strategy`` may be a strategy object or a registered name (built with its defaults).
        """
        klass = cls._class(type_name)
        strategy = kwargs.pop("strategy", None)
        if isinstance(strategy, str):
            return cls.create_with_strategy_name(type_name, tokenizer, strategy, processor_kwargs=kwargs)
        if strategy is None and getattr(klass, "default_strategy", None):
            from pipeline_core.chat.registry import StrategyFactory

            strategy = StrategyFactory.create(klass.default_strategy, tokenizer)
        return klass(tokenizer, strategy=strategy, **kwargs)

    @classmethod
    def create_with_strategy(
        cls, type_name: str, tokenizer: AutoTokenizer, strategy: PromptStrategy, **kwargs
    ) -> Processor:
        return cls._class(type_name)(tokenizer, strategy=strategy, **kwargs)

    @classmethod
    def create_with_strategy_name(
        cls,
        type_name: str,
        tokenizer: AutoTokenizer,
        strategy_name: str,
        processor_kwargs: dict | None = None,
        **kwargs,
    ) -> Processor:
        """``kwargs`` go to the strategy; ``processor_kwargs`` (normalizer, max_length, ...) to the processor."""
        from pipeline_core.chat.registry import StrategyFactory

        strategy = StrategyFactory.create(strategy_name, tokenizer, **kwargs)
        return cls._class(type_name)(tokenizer, strategy=strategy, **(processor_kwargs or {}))

    @classmethod
    def names(cls) -> list[str]:
        return sorted(cls._registry)
