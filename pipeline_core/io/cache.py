"""The cache stage: JSONL chunk -> tokenized (optionally packed) HDF5, one output per input.

Streaming: the input is read, processed and written batch by batch, so memory is bounded by the
batch size and one pack, not by the chunk. Bad rows are quarantined or raised per ``on_error``;
``rows_read = samples_written + rows_skipped`` always holds and is stored in the file.
"""

from __future__ import annotations

import time
from dataclasses import dataclass

from pipeline_core.errors import ConfigError
from pipeline_core.io.errors_log import ErrorLog
from pipeline_core.io.fs import fetch_files, join_url, local_staging, url_to_fs
from pipeline_core.io.h5 import H5Writer
from pipeline_core.io.jsonl import JsonlReader
from pipeline_core.io.results import CacheStats
from pipeline_core.packing import SequencePacker
from pipeline_core.processors.base import ProcessedBatch, Processor
from pipeline_core.version import FORMAT_VERSION

BATCH_SIZE = 1024


@dataclass(frozen=True, slots=True)
class CacheOptions:
    pack_size: int = 0
    pad_value: int | None = None
    on_error: str = "skip"
    batch_size: int = BATCH_SIZE


def output_names(input_url: str, output_dir: str) -> tuple[str, str]:
    """(HDF5 URL, errors URL) for an input: ``train_chunk_0.jsonl`` -> ``train_chunk_0.h5``."""
    name = str(input_url).rstrip("/").rsplit("/", 1)[-1]
    stem = name[: -len(".jsonl")] if name.endswith(".jsonl") else name.rsplit(".", 1)[0]
    return join_url(output_dir, f"{stem}.h5"), join_url(output_dir, f"{stem}.errors.jsonl")


def resolve_pad_value(processor: Processor, pack_size: int, pad_value: int | None) -> int | None:
    if pack_size <= 0 or pad_value is not None:
        return pad_value
    if processor.tokenizer.has_role("pad"):
        return processor.tokenizer.pad_token_id
    raise ConfigError("packing needs a pad value: pass pad_value=... or load the tokenizer with pad_token=...")


def make_packer(processor: Processor, options: CacheOptions) -> SequencePacker | None:
    if options.pack_size <= 0:
        return None
    if len(processor.groups) > 1:
        raise ConfigError(
            f"the {processor.type!r} processor writes {len(processor.groups)} sequence groups "
            f"({', '.join(processor.groups)}); streaming-concat packing would separate them: use pack_size=0"
        )
    return SequencePacker(options.pack_size, resolve_pad_value(processor, options.pack_size, options.pad_value))


class _ChunkWriter:
    """Writes processed batches (packed or not) to an H5Writer and keeps the counts."""

    def __init__(self, writer: H5Writer, processor: Processor, packer: SequencePacker | None, stats: CacheStats):
        self.writer, self.processor, self.packer, self.stats = writer, processor, packer, stats

    def write(self, batch: ProcessedBatch) -> None:
        self.stats.samples_written += batch.n_samples
        self.stats.rows_truncated += batch.truncated
        for length_key in self.processor.groups:
            self.stats.tokens_written += int(batch.samples[length_key].offsets[-1])
        if self.packer is None:
            for key, ragged in batch.samples.items():
                self.writer.append_ragged(key, ragged)
        else:
            self._write_packs(self.packer.add(batch.samples))

    def finish(self) -> None:
        if self.packer is not None:
            self._write_packs(self.packer.flush())
            self.stats.packs, self.stats.pad_tokens = self.packer.packs, self.packer.pad_tokens

    def _write_packs(self, packs: dict) -> None:
        for key, rows in packs.items():
            self.writer.append_fixed(key, rows)


def cache_file(
    input_url: str,
    output_dir: str,
    processor: Processor,
    options: CacheOptions = CacheOptions(),
    storage_options: dict | None = None,
) -> CacheStats:
    """Tokenize one JSONL file into ``{stem}.h5`` (plus ``{stem}.errors.jsonl`` when rows were skipped)."""
    started = time.perf_counter()
    output_url, errors_url = output_names(input_url, output_dir)
    packer = make_packer(processor, options)
    stats = CacheStats(input_url=input_url, output_url=output_url, pack_size=max(options.pack_size, 0))
    log = ErrorLog(input_url, options.on_error)
    reader = JsonlReader(input_url, options.batch_size, storage_options)
    with local_staging(output_url, storage_options, suffix=".h5") as tmp:
        writer = H5Writer(tmp)
        done = False
        try:
            chunk = _ChunkWriter(writer, processor, packer, stats)
            for lines in reader:
                stats.rows_read += len(lines)
                log.add_all(lines.errors)
                batch = processor.process_batch(lines.rows)
                log.add_all([(lines.lines[i], e) for i, e in batch.errors])
                chunk.write(batch)
            chunk.finish()
            stats.source_sha256 = reader.sha256
            stats.skipped = log.counts
            writer.set_attrs(output_attrs(processor, options, stats, packer))
            done = True
        finally:
            writer.close(complete=done)
    stats.errors_url = log.publish(errors_url, storage_options)
    stats.seconds = time.perf_counter() - started
    return stats


def output_attrs(processor: Processor, options: CacheOptions, stats: CacheStats, packer: SequencePacker | None) -> dict:
    tok = processor.tokenizer
    desc = processor.describe()
    return {
        "format_version": FORMAT_VERSION,
        "tokenizer_fingerprint": tok.fingerprint,
        "vocab_size": tok.vocab_size,
        **{
            f"{role}_id": (getattr(tok, f"{role}_token_id") if tok.has_role(role) else -1)
            for role in ("bos", "eos", "pad")
        },
        **desc,
        "keys": processor.keys,
        "pack_size": options.pack_size if packer else 0,
        "pad_value": packer.pad_value if packer else -1,
        "source_url": stats.input_url,
        "source_sha256": stats.source_sha256,
        "rows_read": stats.rows_read,
        "samples_written": stats.samples_written,
        "rows_skipped": stats.rows_skipped,
        "skipped_by_reason": dict(sorted(stats.skipped.items())),
        "rows_truncated": stats.rows_truncated,
        "tokens_written": stats.tokens_written,
        "packs": packer.packs if packer else 0,
    }


def list_inputs(inputs, storage_options: dict | None = None) -> list[str]:
    """A file, a list of files, or a folder of ``.jsonl`` files -> list of URLs."""
    if isinstance(inputs, (list, tuple)):
        return [str(i) for i in inputs]
    fs, path = url_to_fs(str(inputs), storage_options)
    if fs.isdir(path):
        found = fetch_files(str(inputs), ".jsonl", storage_options)
        if not found:
            raise FileNotFoundError(f"no .jsonl files in {inputs}")
        return found
    if not fs.exists(path):
        raise FileNotFoundError(f"input {inputs} does not exist")
    return [str(inputs)]


def cache_jsonl(
    inputs,
    output_dir: str,
    processor: Processor,
    pack_size: int = 0,
    pad_value: int | None = None,
    normalizer=None,
    on_error: str = "skip",
    storage_options: dict | None = None,
    batch_size: int = BATCH_SIZE,
) -> list[str]:
    """Tokenize every input JSONL into one HDF5 in ``output_dir``; returns the output URLs."""
    if normalizer is not None:
        processor.normalizer = normalizer
    options = CacheOptions(pack_size, pad_value, on_error, batch_size)
    fs, root = url_to_fs(str(output_dir), storage_options)
    fs.makedirs(root, exist_ok=True)
    return [
        cache_file(url, output_dir, processor, options, storage_options).output_url
        for url in list_inputs(inputs, storage_options)
    ]
