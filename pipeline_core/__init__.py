"""h5pipe's core library: tokenizer, strategies, processors, packer, normalizer and I/O.

Pure Python: nothing here imports Prefect, so every piece can be used and tested as plain
functions; the ``tasks`` and ``flows`` packages add orchestration on top.
"""

from pipeline_core.errors import BadRowError, ConfigError, RowError
from pipeline_core.io import (
    CacheOptions,
    CacheStats,
    ExportStats,
    IOHandler,
    cache_file,
    cache_jsonl,
    export_chunk,
    export_dataset,
    fetch_files,
    fetch_folders,
    load_h5,
    merge_megatron,
    read_attrs,
    save_h5,
)
from pipeline_core.io.export import export_source, plan_chunks
from pipeline_core.packing import SequencePacker
from pipeline_core.processors import ProcessedBatch, Processor, ProcessorFactory
from pipeline_core.ragged import Ragged
from pipeline_core.sources import open_source
from pipeline_core.strategies import AlpacaStrategy, ChatMLStrategy, PromptStrategy, StrategyFactory
from pipeline_core.template_strategy import TemplateStrategy
from pipeline_core.text import DEFAULT_REPLACEMENTS, TextNormalizer
from pipeline_core.tokenizer import AutoTokenizer
from pipeline_core.version import FORMAT_VERSION

__all__ = [
    "DEFAULT_REPLACEMENTS",
    "FORMAT_VERSION",
    "AlpacaStrategy",
    "AutoTokenizer",
    "BadRowError",
    "CacheOptions",
    "CacheStats",
    "ChatMLStrategy",
    "ConfigError",
    "ExportStats",
    "H5Dataset",
    "IOHandler",
    "ProcessedBatch",
    "Processor",
    "ProcessorFactory",
    "PromptStrategy",
    "Ragged",
    "RowError",
    "SequencePacker",
    "StrategyFactory",
    "TemplateStrategy",
    "TextNormalizer",
    "cache_file",
    "cache_jsonl",
    "export_chunk",
    "export_dataset",
    "export_source",
    "fetch_files",
    "fetch_folders",
    "load_h5",
    "merge_megatron",
    "open_source",
    "plan_chunks",
    "read_attrs",
    "save_h5",
]


def __getattr__(name: str):
    # H5Dataset imports torch: load it on first use, not with the package.
    if name == "H5Dataset":
        from pipeline_core.dataset import H5Dataset

        return H5Dataset
    raise AttributeError(f"module 'pipeline_core' has no attribute {name!r}")
