"""h5pipe's core library: raw rows in, training-ready HDF5 and Megatron files out.

Pure Python: nothing here imports Prefect, so every piece can be used and tested as plain
functions; the ``tasks`` and ``flows`` packages add orchestration on top.

One package per concept, lowest first (each may import only those before it; the test
``tests/pipeline_core/test_layout.py`` holds the exact rule):

    errors, version   the two root modules every package may use
    memory            giving freed heap pages back between batches
    storage           fsspec access, hashing, per-machine records, credential masking
    formats           ragged arrays, HDF5, JSONL, Megatron .bin/.idx, the key layout
    tokenizer         AutoTokenizer, its encode backends and their verification
    converters        LLaMA-Factory row shapes -> the standard messages sample
    chat              prompt strategies (chatml, alpaca, a model's chat template)
    processors        pt, sentences, sft, dpo: rows -> token sequences and masks
    packing           concat and best-fit-decreasing packing into fixed-length rows
    sources           where the export stage's rows come from
    commit            the manifest, stamps, sweep, quarantine log and verify
    stages            export and cache, composing all of the above
    loader            H5Dataset and h5_collate for trainers (import torch, loaded on first use)
"""

from pipeline_core.chat import AlpacaStrategy, ChatMLStrategy, PromptStrategy, StrategyFactory, TemplateStrategy
from pipeline_core.errors import BadRowError, ConfigError, RowError
from pipeline_core.formats.h5 import load_h5, read_attrs, save_h5
from pipeline_core.formats.handler import IOHandler
from pipeline_core.formats.megatron.output import merge_megatron
from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.sequence import SequencePacker
from pipeline_core.processors import ProcessedBatch, Processor, ProcessorFactory
from pipeline_core.processors.normalize import DEFAULT_REPLACEMENTS, TextNormalizer
from pipeline_core.sources import open_source
from pipeline_core.stages.cache import CacheOptions, cache_file, cache_jsonl
from pipeline_core.stages.export import export_chunk, export_dataset, export_source, plan_chunks
from pipeline_core.stages.results import CacheStats, ExportStats
from pipeline_core.storage.fs import fetch_files, fetch_folders
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
    "H5Collate",
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
    "h5_collate",
    "load_h5",
    "merge_megatron",
    "open_source",
    "plan_chunks",
    "read_attrs",
    "save_h5",
]


def __getattr__(name: str):
    # the loader imports torch: load it on first use, not with the package.
    if name in ("H5Dataset", "H5Collate", "h5_collate"):
        from pipeline_core import loader

        return getattr(loader, name)
    raise AttributeError(f"module 'pipeline_core' has no attribute {name!r}")
