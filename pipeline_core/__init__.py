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

# Every name is imported on first use (PEP 562): ``import pipeline_core.x`` or the CLI's start
# does not pay for numpy, h5py, tokenizers and the chat templates it does not touch.
_EXPORTS = {
    "AlpacaStrategy": "pipeline_core.chat",
    "AutoTokenizer": "pipeline_core.tokenizer",
    "BadRowError": "pipeline_core.errors",
    "CacheOptions": "pipeline_core.stages.options",
    "CacheStats": "pipeline_core.stages.results",
    "ChatMLStrategy": "pipeline_core.chat",
    "ConfigError": "pipeline_core.errors",
    "DEFAULT_REPLACEMENTS": "pipeline_core.processors.normalize",
    "ExportStats": "pipeline_core.stages.results",
    "FORMAT_VERSION": "pipeline_core.version",
    "H5Collate": "pipeline_core.loader",
    "H5Dataset": "pipeline_core.loader",
    "IOHandler": "pipeline_core.formats.handler",
    "ProcessedBatch": "pipeline_core.processors",
    "Processor": "pipeline_core.processors",
    "ProcessorFactory": "pipeline_core.processors",
    "PromptStrategy": "pipeline_core.chat",
    "Ragged": "pipeline_core.formats.ragged",
    "RowError": "pipeline_core.errors",
    "SourceError": "pipeline_core.errors",
    "SequencePacker": "pipeline_core.packing.sequence",
    "StrategyFactory": "pipeline_core.chat",
    "TemplateStrategy": "pipeline_core.chat",
    "TextNormalizer": "pipeline_core.processors.normalize",
    "cache_file": "pipeline_core.stages.cache",
    "cache_jsonl": "pipeline_core.stages.cache",
    "export_chunk": "pipeline_core.stages.export",
    "export_dataset": "pipeline_core.stages.export",
    "export_source": "pipeline_core.stages.export",
    "fetch_files": "pipeline_core.storage.fs",
    "fetch_folders": "pipeline_core.storage.fs",
    "h5_collate": "pipeline_core.loader",
    "load_h5": "pipeline_core.formats.h5",
    "merge_megatron": "pipeline_core.formats.megatron.output",
    "open_source": "pipeline_core.sources",
    "plan_chunks": "pipeline_core.stages.export",
    "read_attrs": "pipeline_core.formats.h5",
    "save_h5": "pipeline_core.formats.h5_writer",
}

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
    "SourceError",
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
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'pipeline_core' has no attribute {name!r}")
    from importlib import import_module

    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted({*globals(), *__all__})
