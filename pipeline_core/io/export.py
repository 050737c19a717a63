"""The export stage: a dataset -> JSONL chunks ``{prefix}_chunk_{i}.jsonl``.

Chunk ``i`` holds the output of input rows ``[i * chunk_size, (i + 1) * chunk_size)``, so every
chunk can be exported on its own (the orchestration maps over chunk indices). With a one-to-many
``process_func`` a chunk holds more lines than ``chunk_size``; with ``None`` or ``[]`` fewer, and
the filtered rows are counted.
"""

from __future__ import annotations

import hashlib
import math
import os
from collections.abc import Callable, Iterable, Iterator

import orjson

from pipeline_core.io.fs import join_url, local_staging, url_to_fs
from pipeline_core.io.results import ExportStats

ProcessFunc = Callable[[dict], dict | list[dict] | None]
ROW_BATCH = 8192


def chunk_name(prefix: str, index: int) -> str:
    return f"{prefix}_chunk_{index}.jsonl"


def chunk_count(n_rows: int, chunk_size: int) -> int:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return max(1, math.ceil(n_rows / chunk_size))


def iter_rows(dataset, start: int, stop: int) -> Iterator[dict]:
    """Rows ``start..stop-1`` of a datasets.Dataset (read as Arrow in batches) or a list of dicts."""
    if hasattr(dataset, "with_format") and hasattr(dataset, "__len__"):
        arrow = dataset.with_format("arrow")
        for lo in range(start, stop, ROW_BATCH):
            yield from arrow[lo : min(stop, lo + ROW_BATCH)].to_pylist()
    else:
        yield from dataset[start:stop]


def apply(process_func: ProcessFunc | None, rows: Iterable[dict], stats: ExportStats) -> Iterator[dict]:
    for row in rows:
        stats.rows_in += 1
        out = row if process_func is None else process_func(row)
        if out is None or (isinstance(out, list) and not out):
            stats.rows_filtered += 1
            continue
        if isinstance(out, dict):
            yield out
        elif isinstance(out, list):
            yield from _check_dicts(out)
        else:
            raise TypeError(f"process_func returned a {type(out).__name__}; return a dict, a list of dicts or None")


def _check_dicts(rows: list) -> Iterator[dict]:
    for row in rows:
        if not isinstance(row, dict):
            raise TypeError(f"process_func returned a list holding a {type(row).__name__}; every item must be a dict")
        yield row


def _dumps(row: dict) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


def write_chunk(rows: Iterable[dict], url: str, stats: ExportStats, storage_options: dict | None = None) -> ExportStats:
    """Write rows as JSONL at ``url`` atomically; fills rows_out, sha256 and size."""
    digest = hashlib.sha256()
    with local_staging(url, storage_options, suffix=".jsonl") as tmp:
        with open(tmp, "wb", buffering=1 << 20) as f:
            for row in rows:
                line = _dumps(row)
                digest.update(line)
                f.write(line)
                stats.rows_out += 1
        stats.size = os.path.getsize(tmp)
    stats.sha256 = digest.hexdigest()
    return stats


def export_chunk(
    dataset,
    index: int,
    output_dir: str,
    prefix: str = "train",
    chunk_size: int = 1_000_000,
    process_func: ProcessFunc | None = None,
    storage_options: dict | None = None,
) -> ExportStats:
    """Export chunk ``index`` of a sized dataset."""
    url = join_url(output_dir, chunk_name(prefix, index))
    stats = ExportStats(index=index, output_url=url)
    start = index * chunk_size
    stop = min(len(dataset), start + chunk_size)
    return write_chunk(apply(process_func, iter_rows(dataset, start, stop), stats), url, stats, storage_options)


def export_dataset(
    dataset,
    output_dir: str,
    prefix: str = "train",
    chunk_size: int = 1_000_000,
    process_func: ProcessFunc | None = None,
    storage_options: dict | None = None,
) -> list[str]:
    """Split a dataset into JSONL chunks in ``output_dir``; returns their URLs in order."""
    fs, root = url_to_fs(str(output_dir), storage_options)
    fs.makedirs(root, exist_ok=True)
    n = chunk_count(len(dataset), chunk_size)
    return [
        export_chunk(dataset, i, output_dir, prefix, chunk_size, process_func, storage_options).output_url
        for i in range(n)
    ]
