"""Build a tokenizer and a processor from plain settings (what a config file or flow holds).

The orchestration layer validates user input with pydantic and hands these dataclasses to the
core; the core never sees pydantic or Prefect.
"""

from __future__ import annotations

import threading
from dataclasses import asdict, dataclass, field
from pathlib import Path

from pipeline_core.errors import ConfigError
from pipeline_core.processors import Processor, ProcessorFactory
from pipeline_core.processors.normalize import TextNormalizer
from pipeline_core.tokenizer.auto import AutoTokenizer
from pipeline_core.tokenizer.folder import OLD_TEMPLATE_DIR, TEMPLATE_DIR


@dataclass(frozen=True)
class TokenizerSpec:
    path: str
    eos_token: str | None = None
    bos_token: str | None = None
    pad_token: str | None = None
    backend: str = "auto"

    def roles(self) -> dict[str, str]:
        return {
            k: v
            for k, v in (("eos_token", self.eos_token), ("bos_token", self.bos_token), ("pad_token", self.pad_token))
            if v
        }


@dataclass(frozen=True)
class ProcessorSpec:
    processor: str = "pt"
    strategy: str | None = None
    strategy_kwargs: dict = field(default_factory=dict)
    processor_kwargs: dict = field(default_factory=dict)  # e.g. converter, train_on, media
    normalizer: bool = False
    normalizer_rules: dict = field(default_factory=dict)
    max_length: int | None = None
    overflow: str = "drop"

    def to_dict(self) -> dict:
        return asdict(self)


_lock = threading.Lock()
_tokenizers: dict[tuple, AutoTokenizer] = {}
TOKENIZER_FILES = ("tokenizer.json", "tokenizer_config.json", "special_tokens_map.json", "chat_template.jinja")


def load_tokenizer(spec: TokenizerSpec) -> AutoTokenizer:
    """One tokenizer per spec and process: tasks in threads share it (encoding is thread-safe).

    A local tokenizer is loaded again when one of its files changed (an edited chat template
    must not be served from memory); a remote one is read once per process.
    """
    key = (spec, _local_stamps(spec.path))
    with _lock:
        if key not in _tokenizers:
            _tokenizers[key] = AutoTokenizer.from_file(spec.path, backend=spec.backend, **spec.roles())
        return _tokenizers[key]


def _local_stamps(path: str) -> tuple:
    if "://" in path and not path.startswith("file://"):
        return ()
    local = Path(path.removeprefix("file://"))
    folder = local if local.is_dir() else local.parent
    named = sorted(folder.glob(f"{TEMPLATE_DIR}/*.jinja")) + sorted(folder.glob(f"{OLD_TEMPLATE_DIR}/*.jinja"))
    files = [folder / name for name in TOKENIZER_FILES] + named
    files += [] if local.is_dir() else [local]
    return tuple((str(f), f.stat().st_mtime_ns, f.stat().st_size) for f in files if f.exists())


def build_processor(spec: ProcessorSpec, tokenizer: AutoTokenizer) -> Processor:
    kwargs = dict(spec.processor_kwargs)
    kwargs["max_length"], kwargs["overflow"] = spec.max_length, spec.overflow
    if spec.normalizer or spec.normalizer_rules:
        kwargs["normalizer"] = TextNormalizer(spec.normalizer_rules or None)
    strategy = spec.strategy or (_default_strategy(spec.processor) if spec.strategy_kwargs else None)
    if strategy:
        return ProcessorFactory.create_with_strategy_name(
            spec.processor, tokenizer, strategy, processor_kwargs=kwargs, **spec.strategy_kwargs
        )
    return ProcessorFactory.create(spec.processor, tokenizer, **kwargs)


def _default_strategy(processor: str) -> str:
    """The strategy ``strategy_kwargs`` apply to when none is named: the processor's default, never
    none at all (kwargs given and silently dropped would change nothing the user can see)."""
    name = getattr(ProcessorFactory._class(processor), "default_strategy", None)
    if not name:
        raise ConfigError(f"strategy_kwargs were given, but the {processor} processor takes no strategy: drop them")
    return name
