"""The export stage: a source -> JSONL chunks ``{prefix}_chunk_{i}.jsonl``.

The source is anything ``open_source`` accepts: a ``datasets.Dataset``/``IterableDataset``, a list
of dicts, data files, a folder or URL, a hub id, or a dataset_info YAML mixing several datasets.

- Sized sources: chunk ``i`` holds the output of input rows ``[i * chunk_size, (i + 1) * chunk_size)``,
  so every chunk can be exported on its own (``export_chunk``; the orchestration maps over
  ``range(plan_chunks(...))``).
- Streaming sources (``plan_chunks`` is None): one sequential pass, a chunk cut every ``chunk_size``
  input rows.

Each row goes: its dataset's converter (if the dataset names one) -> ``process_func`` -> line. A row
the converter rejects is counted by reason and, under ``on_error="skip"``, written to
``{prefix}_chunk_{i}.errors.jsonl`` as ``{"dataset", "index", "reason", "field", "message"}``
(``index`` is 0-based within the dataset); ``on_error="raise"`` stops with ``SourceRowError``. With a
one-to-many ``process_func`` a chunk holds more lines than ``chunk_size``; with ``None`` or ``[]``
fewer, and the filtered rows are counted.

Values are written exactly: a row holding NaN or +/-Infinity anywhere (JSON has no such number;
orjson would write ``null``) is not written but counted and quarantined like a rejected row, with
reason ``non_finite_number`` and the path of the value as ``field``. The check is cheap: a flat
row's values are looked at directly, a nested row is walked only when its line holds ``null``.
A row holding a value JSON has no form for at all (a set, bytes, an integer beyond 64 bits, a
non-string key: orjson refuses it without naming it) is reported the same way, as
``unencodable_value`` with the path of the value.

``_source``: rows of a source that mixes several datasets carry ``"_source": <dataset name>``, added
after ``process_func`` (replacing a key of that name), so per-dataset counts can be recomputed from
the outputs; ``tag_source=True/False`` forces it on or off.
"""

from __future__ import annotations

import hashlib
import itertools
import math
import os
import re
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

import orjson

from pipeline_core.formats.json_values import non_finite_in, unencodable
from pipeline_core.sources import Record, RowFailure, Source, convert_row, open_source
from pipeline_core.sources.convert import OnError, SourceRowError, check_on_error
from pipeline_core.sources.single import require_sized
from pipeline_core.stages.results import ExportResult, ExportStats
from pipeline_core.storage.fs import fetch_files, join_url, local_staging, remove_quietly, url_to_fs

ProcessFunc = Callable[[dict], dict | list[dict] | None]
SOURCE_FIELD = "_source"


@dataclass(frozen=True, slots=True)
class ExportOptions:
    prefix: str = "train"
    chunk_size: int = 1_000_000
    process_func: ProcessFunc | None = None
    storage_options: dict | None = None
    on_error: OnError = "skip"
    tag_source: bool | None = None  # None: on when the source mixes several datasets

    def __post_init__(self) -> None:
        if isinstance(self.chunk_size, bool) or not isinstance(self.chunk_size, int) or self.chunk_size <= 0:
            raise ValueError(f"chunk_size must be a positive number of rows, got {self.chunk_size!r}")
        check_on_error(self.on_error)


def chunk_name(prefix: str, index: int) -> str:
    return f"{prefix}_chunk_{index}.jsonl"


def errors_name(prefix: str, index: int) -> str:
    return f"{prefix}_chunk_{index}.errors.jsonl"


def stale_chunks(output_dir: str, prefix: str, kept: list[str], storage_options: dict | None = None) -> list[str]:
    """Chunk files (and their errors files) of ``prefix`` in ``output_dir`` that are not ``kept``:
    what an earlier, larger export left. A re-export replaces the folder's set, so they go."""
    pattern = re.compile(rf"{re.escape(prefix)}_chunk_\d+(\.errors)?\.jsonl")
    kept_names = {u.rsplit("/", 1)[-1] for u in kept}
    kept_names |= {n[: -len(".jsonl")] + ".errors.jsonl" for n in kept_names}
    listed = fetch_files(output_dir, ".jsonl", storage_options)
    return [u for u in listed if pattern.fullmatch(u.rsplit("/", 1)[-1]) and u.rsplit("/", 1)[-1] not in kept_names]


def remove_stale_chunks(
    output_dir: str, prefix: str, kept: list[str], storage_options: dict | None = None
) -> list[str]:
    """Remove ``stale_chunks``; call it after the manifest committed ``kept`` (readers follow it)."""
    stale = stale_chunks(output_dir, prefix, kept, storage_options)
    for url in stale:
        remove_quietly(url, storage_options)
    return stale


def chunk_count(n_rows: int, chunk_size: int) -> int:
    if chunk_size <= 0:
        raise ValueError(f"chunk_size must be positive, got {chunk_size}")
    return max(1, math.ceil(n_rows / chunk_size))


def plan_chunks(source, chunk_size: int = 1_000_000, **source_options) -> int | None:
    """How many chunks a sized source makes; None for a streaming source (export it in one pass)."""
    rows = open_source(source, **source_options).num_rows
    return None if rows is None else chunk_count(rows, chunk_size)


def iter_rows(dataset, start: int, stop: int) -> Iterator[dict]:
    """Rows ``start..stop-1`` of a sized source, as stored (before any converter)."""
    return open_source(dataset).iter_rows(start, stop)


def export_source(
    source,
    output_dir: str,
    prefix: str = "train",
    chunk_size: int = 1_000_000,
    process_func: ProcessFunc | None = None,
    storage_options: dict | None = None,
    *,
    on_error: OnError = "skip",
    tag_source: bool | None = None,
    **source_options,
) -> ExportResult:
    """Export every chunk of ``source``; per-chunk stats and per-dataset counts.

    ``storage_options`` serve the output and the source; ``source_options`` are ``SourceOptions``
    fields (split, streaming, seed, converter, name, subset, datasets, total). The export replaces
    the folder's set: chunks of ``prefix`` an earlier, larger export left are removed at the end.
    """
    opts = ExportOptions(prefix, chunk_size, process_func, storage_options, on_error, tag_source)
    src = open_source(source, storage_options=storage_options, **source_options)
    fs, root = url_to_fs(str(output_dir), storage_options)
    fs.makedirs(root, exist_ok=True)
    if src.num_rows is None:
        chunks = list(_export_stream(src, str(output_dir), opts))
    else:
        chunks = [_export_sized(src, i, str(output_dir), opts) for i in range(chunk_count(src.num_rows, chunk_size))]
    remove_stale_chunks(str(output_dir), prefix, [c.output_url for c in chunks], storage_options)
    return ExportResult(src.name, chunks, _dataset_counts(src, chunks))


def export_dataset(
    source,
    output_dir: str,
    prefix: str = "train",
    chunk_size: int = 1_000_000,
    process_func: ProcessFunc | None = None,
    storage_options: dict | None = None,
    **options,
) -> list[str]:
    """Split a source into JSONL chunks in ``output_dir``; returns their URLs in order."""
    return export_source(source, output_dir, prefix, chunk_size, process_func, storage_options, **options).urls


def export_chunk(
    source,
    index: int,
    output_dir: str,
    prefix: str = "train",
    chunk_size: int = 1_000_000,
    process_func: ProcessFunc | None = None,
    storage_options: dict | None = None,
    *,
    on_error: OnError = "skip",
    tag_source: bool | None = None,
    **source_options,
) -> ExportStats:
    """Export chunk ``index`` of a sized source on its own."""
    opts = ExportOptions(prefix, chunk_size, process_func, storage_options, on_error, tag_source)
    src = open_source(source, storage_options=storage_options, **source_options)
    n_chunks = chunk_count(require_sized(src, "export_chunk"), chunk_size)
    if not 0 <= index < n_chunks:
        raise ValueError(f"chunk {index} does not exist: {src.num_rows} rows make {n_chunks} chunks of {chunk_size}")
    return _export_sized(src, index, str(output_dir), opts)


def _export_sized(source: Source, index: int, output_dir: str, opts: ExportOptions) -> ExportStats:
    start = index * opts.chunk_size
    return _export_records(source, source.records(start, start + opts.chunk_size), index, output_dir, opts)


def _export_stream(source: Source, output_dir: str, opts: ExportOptions) -> Iterator[ExportStats]:
    """One pass; a chunk every chunk_size input rows (chunk 0 is written even when the source is empty)."""
    records = iter(source.records())
    index, first = 0, next(records, None)
    while True:
        batch = (
            itertools.chain([first], itertools.islice(records, opts.chunk_size - 1)) if first is not None else iter(())
        )
        yield _export_records(source, batch, index, output_dir, opts)
        first = next(records, None)
        if first is None:
            return
        index += 1


def _export_records(
    source: Source, records: Iterable[Record], index: int, output_dir: str, opts: ExportOptions
) -> ExportStats:
    url = join_url(output_dir, chunk_name(opts.prefix, index))
    stats = ExportStats(index=index, output_url=url)
    failures: list[RowFailure] = []
    tag = opts.tag_source if opts.tag_source is not None else len(source.converters) > 1
    lines = _output_rows(records, source, opts, stats, failures, tag)
    errors_url = join_url(output_dir, errors_name(opts.prefix, index))

    def publish_errors() -> None:  # before the chunk itself, which is the completion mark
        stats.errors_url = write_failures(failures, errors_url, opts.storage_options)

    return write_chunk(lines, url, stats, opts.storage_options, before_publish=publish_errors)


def _output_rows(
    records: Iterable[Record], source: Source, opts: ExportOptions, stats: ExportStats, failures: list, tag: bool
) -> Iterator[bytes]:
    """The JSONL lines of the records; a rejected record is counted and kept in ``failures``."""
    for record in records:
        stats.rows_in += 1
        stats.dataset_rows[record.dataset] += 1
        lines = _record_lines(record, source, opts, stats, tag)
        if isinstance(lines, RowFailure):
            failures.append(lines)
            stats.failed[lines.reason] += 1
            stats.dataset_failed[record.dataset] += 1
            continue
        yield from lines


def _record_lines(
    record: Record, source: Source, opts: ExportOptions, stats: ExportStats, tag: bool
) -> list[bytes] | RowFailure:
    """One record's output lines, or why it is not written (all of its lines go together)."""
    sample = convert_row(record, source.converters.get(record.dataset), opts.on_error)
    if isinstance(sample, RowFailure):
        return sample
    lines = []
    for out in process_row(opts.process_func, sample, stats):
        try:
            line = _dumps({**out, SOURCE_FIELD: record.dataset} if tag else out)
        except TypeError as e:  # orjson.JSONEncodeError: a value JSON has no form for
            return _unencodable_failure(record, *unencodable(out, str(e)), opts.on_error)
        found = non_finite_in(out, line)
        if found is not None:
            return _non_finite_failure(record, *found, opts.on_error)
        lines.append(line)
    return lines


def _value_failure(record: Record, reason: str, field: str, message: str, on_error: OnError) -> RowFailure:
    """A row not written for a value at ``field`` (its path; empty for the row as a whole)."""
    failure = RowFailure(record.dataset, record.index, reason, field or None, f"{field or 'the row'} {message}")
    if on_error == "raise":
        raise SourceRowError(failure)
    return failure


def _non_finite_failure(record: Record, field: str, value: float, on_error: OnError) -> RowFailure:
    message = (
        f"is {value}, which JSON cannot express (it would be written as null); "
        "make it null or a finite number in the source, or in the process_func that made it"
    )
    return _value_failure(record, "non_finite_number", field, message, on_error)


def _unencodable_failure(record: Record, field: str, what: str, on_error: OnError) -> RowFailure:
    message = (
        f"holds {what}, which JSON cannot hold; turn it into a string, number, bool, null, list or "
        "object (with string keys) in the source, or in the process_func that made it"
    )
    return _value_failure(record, "unencodable_value", field, message, on_error)


def process_row(process_func: ProcessFunc | None, row: dict, stats: ExportStats) -> list[dict]:
    """The output rows for one input row; None or [] counts as filtered."""
    out = row if process_func is None else process_func(row)
    if out is None or (isinstance(out, list) and not out):
        stats.rows_filtered += 1
        return []
    if isinstance(out, dict):
        return [out]
    if isinstance(out, list):
        return _check_dicts(out)
    raise TypeError(f"process_func returned a {type(out).__name__}; return a dict, a list of dicts or None")


def _check_dicts(rows: list) -> list[dict]:
    for row in rows:
        if not isinstance(row, dict):
            raise TypeError(f"process_func returned a list holding a {type(row).__name__}; every item must be a dict")
    return rows


def _dumps(row: dict) -> bytes:
    return orjson.dumps(row, option=orjson.OPT_SERIALIZE_NUMPY | orjson.OPT_APPEND_NEWLINE)


def write_chunk(
    lines: Iterable[bytes],
    url: str,
    stats: ExportStats,
    storage_options: dict | None = None,
    before_publish: Callable[[], None] | None = None,
) -> ExportStats:
    """Write JSONL lines (each ending in a newline) at ``url`` atomically; fills rows_out, sha256 and size."""
    digest = hashlib.sha256()
    with local_staging(url, storage_options, suffix=".jsonl") as tmp:
        with open(tmp, "wb", buffering=1 << 20) as f:
            for line in lines:
                digest.update(line)
                f.write(line)
                stats.rows_out += 1
        stats.size = os.path.getsize(tmp)
        if before_publish is not None:
            before_publish()
    stats.sha256 = digest.hexdigest()
    return stats


def write_failures(failures: list[RowFailure], url: str, storage_options: dict | None = None) -> str | None:
    """Write the rejected rows (atomically) or remove a stale errors file; the URL written, if any."""
    if not failures:
        remove_quietly(url, storage_options)
        return None
    with local_staging(url, storage_options, suffix=".jsonl") as tmp, open(tmp, "wb") as f:
        for failure in failures:
            f.write(orjson.dumps(failure.to_dict(), option=orjson.OPT_APPEND_NEWLINE))
    return url


def _dataset_counts(source: Source, chunks: list[ExportStats]) -> dict:
    counts = source.summary()
    for stats in chunks:
        for name, n in stats.dataset_rows.items():
            counts[name].rows_read += n
        for name, n in stats.dataset_failed.items():
            counts[name].rows_failed += n
    return counts
