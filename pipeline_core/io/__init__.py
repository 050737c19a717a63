"""Readers and writers: fsspec URLs, JSONL, HDF5, and the export and cache stages."""

from pipeline_core.io.cache import CacheOptions, cache_file, cache_jsonl, list_inputs, output_names
from pipeline_core.io.export import chunk_count, chunk_name, export_chunk, export_dataset
from pipeline_core.io.fs import fetch_files, fetch_folders
from pipeline_core.io.h5 import load_h5, read_attrs, save_h5
from pipeline_core.io.handler import IOHandler
from pipeline_core.io.megatron_out import merge_megatron
from pipeline_core.io.results import CacheStats, ExportStats

__all__ = [
    "CacheOptions",
    "CacheStats",
    "ExportStats",
    "IOHandler",
    "cache_file",
    "cache_jsonl",
    "chunk_count",
    "chunk_name",
    "export_chunk",
    "export_dataset",
    "fetch_files",
    "fetch_folders",
    "list_inputs",
    "load_h5",
    "merge_megatron",
    "output_names",
    "read_attrs",
    "save_h5",
]
