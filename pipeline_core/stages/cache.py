"""The cache stage: JSONL chunk -> tokenized (optionally packed) HDF5, one output per input.

Streaming: the input is read, processed and written batch by batch, so memory is bounded by a
few batches (``batch_size`` rows or ``batch_bytes`` of JSON, whichever comes first; see
``JsonlReader``: the one encoded and those read ahead, see ``read_ahead``) and the packer's
buffer, not by the chunk. Bad rows are quarantined or raised per
``on_error``; ``rows_read = rows_written + rows_skipped`` always holds and is stored in the file
(a row is written when it keeps at least one sample; with ``rewritten="per_turn"`` a row makes one
sample per trained turn, and a turn dropped from a written row counts in ``samples_dropped``).

Options beyond tokenizing (all recorded in the attributes):

- ``output_format``: ``hdf5``, ``megatron`` (``{stem}_{key}_{document|sentence}.bin/.idx`` named as
  Megatron's ``preprocess_data.py`` names them, see ``formats.megatron.output``), ``both``, or
  ``mindspeed`` (MindSpeed-LLM's ``{stem}_packed_{input_ids,attention_mask,labels}_document``,
  unpacked or packed, see ``formats.megatron.mindspeed``);
- ``packing`` with ``pack_size > 0``: ``concat`` (streaming, the default) or ``bfd`` (whole
  samples, DPO pairs in one pack, over ``bfd_window`` samples); packed files also hold
  ``position_ids`` and ``cu_seqlens`` (see ``h5_sink``); ``position_ids="derived"`` leaves the
  per-token ``position_ids`` out, readers compute them from ``cu_seqlens`` (``formats.positions``);
- ``split_sentences`` (pt only): documents become sentence items (see ``sentences``);
- ``max_row_bytes`` (default 32 MiB, None: no limit): longer lines are quarantined as
  ``row_too_large`` without being parsed or held in memory;
- ``max_error_rate`` (default None: no limit): the chunk fails with ``ErrorRateExceeded`` when more
  than this share of its rows was skipped (its errors file is still written; dropped turns of
  written rows do not count).
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Callable, Iterable, Iterator
from functools import partial

from pipeline_core.commit.quarantine import ErrorLog, ErrorRateExceeded, error_rate_problem
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.jsonl import LineBatch
from pipeline_core.formats.keys import KeyLayout
from pipeline_core.formats.megatron.mindspeed import MindSpeedSink
from pipeline_core.formats.megatron.output import MegatronSink
from pipeline_core.memory.heap import HeapTrimmer
from pipeline_core.packing.stage import Packing, PackStage, fit_batch, make_pack_stage
from pipeline_core.processors.base import ProcessedBatch, Processor
from pipeline_core.processors.sentences import SentenceProcessor
from pipeline_core.stages.attrs import output_attrs
from pipeline_core.stages.chunk_writer import ChunkWriter
from pipeline_core.stages.encode_ahead import EncodeAhead, encode_width
from pipeline_core.stages.h5_sink import H5Sink, narrowed_keys
from pipeline_core.stages.input_stream import CacheInput, Opened, Read, StreamItem, input_stream
from pipeline_core.stages.inputs import list_inputs
from pipeline_core.stages.options import BATCH_SIZE, CacheOptions, OutputFormat
from pipeline_core.stages.outputs import check_unique_outputs, output_names, output_stem
from pipeline_core.stages.read_ahead import ReadAhead
from pipeline_core.stages.results import CacheStats
from pipeline_core.storage.fs import is_local, local_staging, url_to_fs

READ_AHEAD = 1  # parsed batches waiting for the encoder (memory: see read_ahead)
# inputs averaging less than this are cached in one thread: 1,000 inputs of 4 KB took 9.1-11.6 s
# that way against 11.4-14.8 s with the read-ahead and encode threads, whose hand-offs (~200
# futex calls per input) cost more than they overlap; at ~200 KB the two were even
ONE_THREAD_BELOW = 64 * 1024


def resolve_pad_value(processor: Processor, pack_size: int, pad_value: int | None) -> int | None:
    if pack_size <= 0 or pad_value is not None:
        return pad_value
    if processor.tokenizer.has_role("pad"):
        return processor.tokenizer.pad_token_id
    raise ConfigError("packing needs a pad value: pass pad_value=... or load the tokenizer with pad_token=...")


def make_packer(processor: Processor, options: CacheOptions, layout: KeyLayout | None = None) -> PackStage | None:
    if not options.packed:
        return None
    pad = resolve_pad_value(processor, options.pack_size, options.pad_value)
    layout = layout or KeyLayout.of(processor)
    if len(layout.groups) > 1 and not processor.paired:
        raise ConfigError(
            f"the {processor.type} processor tokenizes {', '.join(layout.groups)} apart, one dataset each; "
            "packed, they would be mixed into one sequence with nothing saying which document is which: "
            "use pack_size=0, or cache each field in a run of its own"
        )
    return make_pack_stage(layout, options.packing, options.pack_size, pad, options.bfd_window)


def open_chunk(
    h5_path: str | None,
    input_url: str,
    output_dir: str,
    processor: Processor,
    options: CacheOptions,
    stats: CacheStats,
    storage_options: dict | None = None,
) -> ChunkWriter:
    """The chunk's outputs: an H5Sink at ``h5_path`` (None: no HDF5) and/or a MegatronSink."""
    layout = KeyLayout.of(processor)
    packer = make_packer(processor, options, layout)
    h5 = None
    if h5_path:
        pad = resolve_pad_value(processor, options.pack_size, options.pad_value)
        narrow = narrowed_keys(layout, processor.tokenizer.vocab_size, options.pack_size, pad)
        writer = H5Writer(h5_path, compression=options.compression, narrow=narrow)
        h5 = H5Sink(writer, layout, packer, h5_path + ".deferred", options.position_ids)
    megatron = None
    if options.output_format == "mindspeed":
        megatron = MindSpeedSink(output_dir, output_stem(input_url), layout, packer, storage_options)
    elif options.writes_megatron:
        stem, vocab = output_stem(input_url), processor.tokenizer.vocab_size
        names, level = getattr(processor, "megatron_names", {}), "sentence" if options.split_sentences else "document"
        megatron = MegatronSink(output_dir, stem, layout, vocab, storage_options, names=names, level=level)
    fit = None
    if packer is not None:
        fit = partial(
            fit_batch,
            layout=layout,
            pack_size=options.pack_size,
            overflow=processor.overflow,
            whole_samples=packer.whole_samples,
        )
    return ChunkWriter(layout, stats, h5, megatron, fit)


def cache_file(
    input_url: str,
    output_dir: str,
    processor: Processor,
    options: CacheOptions = CacheOptions(),
    storage_options: dict | None = None,
    source_sha256: str | None = None,
    check_source: Callable[[str], None] | None = None,
) -> CacheStats:
    """Tokenize one JSONL file into ``{stem}.h5`` (plus ``{stem}.errors.jsonl`` when rows were skipped,
    and ``{stem}_{key}_document.bin/.idx`` for Megatron output).

    ``source_sha256``: the input's sha256 when the caller took it already; the file is then not
    hashed again while it is read, and the caller must make sure it did not change in between.
    ``check_source(sha256)`` runs once the input is read through, before any output is published
    (the sha256 is ``source_sha256`` or the one the reader took): it raises to refuse the chunk,
    and then nothing is left at the outputs' names (the cache task compares the input's stamp
    from before its hash with the one now)."""
    one = CacheInput(input_url, source_sha256, check_source)
    (stats,) = cache_files([one], output_dir, processor, options, storage_options)
    return stats


def cache_files(
    inputs: Iterable[CacheInput],
    output_dir: str,
    processor: Processor,
    options: CacheOptions = CacheOptions(),
    storage_options: dict | None = None,
    in_one_thread: bool = False,
) -> Iterator[CacheStats]:
    """``cache_file`` of every input, in order, yielding each one's stats once its outputs are
    published; one read-ahead thread and one encode pool serve them all (see ``input_stream``).
    ``in_one_thread``: read, encode and write in the caller's thread, for inputs of a few KB
    (``suits_one_thread``); the outputs are the same.

    An input that fails (a bad row under ``on_error='raise'``, too many errors, a refused
    ``check_source``, an unreadable file) leaves none of its outputs behind and raises; the
    inputs before it are published, the ones after it are not begun. Leaving the loop early
    discards the input in progress the same way."""
    if options.split_sentences:
        processor = SentenceProcessor(processor, options.sentence_splitter)
    concurrent = getattr(processor, "concurrent_batches", False)  # else each batch in this thread, in turn
    width = (options.encode_width or encode_width()) if concurrent else 1
    heap, chunk, read_before = HeapTrimmer(), None, 0
    process = partial(_process, processor)
    stream = input_stream(inputs, options, storage_options)
    # the next batches are read and parsed in a thread (see read_ahead) while the ones before them
    # are encoded (see encode_ahead) and the one before those is written, in input order
    ahead = contextlib.closing(stream) if in_one_thread else ReadAhead(stream, READ_AHEAD)  # closed on leaving
    inline = in_one_thread or not concurrent
    with ahead as items, EncodeAhead(process, items, width, inline=inline) as processed:
        try:
            for item, batch in processed:
                if isinstance(item, Opened):
                    chunk = _OpenChunk(item, output_dir, processor, options, storage_options)
                elif isinstance(item, Read):
                    read_before += chunk.reader.bytes_read
                    stats, chunk = chunk.finish(item.sha256), None
                    yield stats
                else:
                    chunk.add(item, batch)
                    del item, batch  # free its rows before the reader parses the one after next
                    heap.after(read_before + chunk.reader.bytes_read)
        except BaseException:
            if chunk is not None:
                chunk.discard()
            raise


def suits_one_thread(sizes: list[int]) -> bool:
    """Whether inputs of these sizes (bytes) are better cached ``in_one_thread``."""
    return bool(sizes) and sum(sizes) < ONE_THREAD_BELOW * len(sizes)


def _process(processor: Processor, item: StreamItem) -> ProcessedBatch | None:
    return processor.process_batch(item.rows) if isinstance(item, LineBatch) else None


class _OpenChunk:
    """One input's outputs while its batches arrive: staged, then published by ``finish``."""

    def __init__(
        self,
        opened: Opened,
        output_dir: str,
        processor: Processor,
        options: CacheOptions,
        storage_options: dict | None,
    ) -> None:
        self.started, one, self.reader = time.perf_counter(), opened.input, opened.reader
        self.input, self.processor, self.options, self.storage_options = one, processor, options, storage_options
        output_url, self.errors_url = output_names(one.url, output_dir)
        self.stats = CacheStats(
            input_url=one.url,
            output_url=output_url if options.writes_hdf5 else "",
            pack_size=max(options.pack_size, 0),
            output_format=options.output_format,
            packing=options.packing if options.packed else "none",
        )
        self.log = ErrorLog(one.url, options.on_error)
        self._staging = contextlib.ExitStack()
        try:
            tmp = self._staging.enter_context(_h5_staging(output_url, options, storage_options))
            self.writer = open_chunk(tmp, one.url, output_dir, processor, options, self.stats, storage_options)
        except BaseException:
            self._close(publish=False)
            raise

    def add(self, lines: LineBatch, batch: ProcessedBatch) -> None:
        self.stats.rows_read += len(lines)
        batch = self.writer.fit(batch)
        skipped, dropped = split_errors(batch)
        skipped = [*lines.errors, *((lines.lines[i], e) for i, e in skipped)]
        dropped = [(lines.lines[i], e) for i, e in dropped]
        # one call per batch (add_all sorts it), so the quarantine file streams out in line order
        self.log.add_all(skipped + dropped)
        self.stats.skipped.update(e.reason for _, e in skipped)
        self.stats.dropped.update(e.reason for _, e in dropped)
        self.writer.write(batch)

    def finish(self, sha256: str) -> CacheStats:
        """Check the input, close the outputs and publish them: the quarantine file first, the HDF5
        (whose ``complete`` marks completion) last."""
        stats, options = self.stats, self.options
        try:
            stats.source_sha256 = sha256
            if self.input.check_source is not None:
                self.input.check_source(sha256)
            self._enforce_rate()
            if not stats.rows_read:  # an empty input: its outputs still hold every key, with no sample
                self.writer.write(self.processor.process_batch([]))
            self.writer.finish()
            pad = resolve_pad_value(self.processor, options.pack_size, options.pad_value)
            self.writer.close(output_attrs(self.processor, options, stats, pad))
            stats.errors_url = self.log.publish(self.errors_url, self.storage_options)
        except BaseException:
            self.discard()
            raise
        self._close(publish=True)  # the HDF5
        stats.seconds = time.perf_counter() - self.started
        return stats

    def _enforce_rate(self) -> None:
        """Fail the chunk when its skipped rows exceed ``max_error_rate`` (turns dropped from written
        rows are not rows), after publishing the quarantine file so its reasons can be read."""
        stats = self.stats
        problem = error_rate_problem(
            stats.input_url, stats.rows_skipped, stats.rows_read, self.options.max_error_rate, stats.skipped
        )
        if problem is None:
            return
        written = self.log.publish(self.errors_url, self.storage_options)
        raise ErrorRateExceeded(f"{problem} (the quarantined rows are listed in {written})")

    def discard(self) -> None:
        try:
            self.writer.discard()
        finally:
            self._close(publish=False)

    def _close(self, publish: bool) -> None:
        """Leave the staging: publish the HDF5, or remove it (as on an error in its ``with``)."""
        try:
            if publish:
                self._staging.close()
            else:
                self._staging.__exit__(_Discarded, _Discarded(), None)
        finally:
            self.log.close()


def split_errors(batch: ProcessedBatch) -> tuple[list[tuple[int, RowError]], list[tuple[int, RowError]]]:
    """The batch's errors as (skipped rows, dropped samples), by position in the batch.

    A row that kept no sample is skipped with its first error only, however many of its samples
    failed; an error of a row that kept another sample (``rewritten="per_turn"``) is a dropped sample.
    """
    written = set(batch.rows.tolist())
    skipped: dict[int, RowError] = {}
    dropped = []
    for position, error in batch.errors:
        if position in written:
            dropped.append((position, error))
        else:
            skipped.setdefault(position, error)
    return list(skipped.items()), dropped


class _Discarded(Exception):
    """Thrown into the staging to leave it without publishing."""


def _h5_staging(output_url: str, options: CacheOptions, storage_options: dict | None):
    if options.writes_hdf5:
        return local_staging(output_url, storage_options, suffix=".h5")
    return contextlib.nullcontext(None)


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
    *,
    output_format: OutputFormat = "hdf5",
    packing: Packing = "concat",
    bfd_window: int = 1000,
    split_sentences: bool = False,
) -> list[str]:
    """Tokenize every input JSONL into one HDF5 in ``output_dir``; returns the HDF5 URLs (with
    ``output_format='megatron'``: the Megatron prefixes of every input, key by key).
    The keyword-only settings are CacheOptions'."""
    if normalizer is not None:
        processor.normalizer = normalizer
    options = CacheOptions(
        pack_size, pad_value, on_error, batch_size, output_format, packing, bfd_window, split_sentences
    )
    fs, root = url_to_fs(str(output_dir), storage_options)
    fs.makedirs(root, exist_ok=True)
    urls = list_inputs(inputs, storage_options)
    check_unique_outputs(urls)
    # H5PIPE_ENCODE_AHEAD above 1 asks for batches encoded at once: the threaded path then
    one_thread = encode_width() == 1 and suits_one_thread(local_sizes(urls, storage_options))
    outputs = []
    for stats in cache_files(map(CacheInput, urls), output_dir, processor, options, storage_options, one_thread):
        outputs += [stats.output_url] if options.writes_hdf5 else list(stats.megatron_prefixes.values())
    return outputs


def local_sizes(urls: list[str], storage_options: dict | None = None) -> list[int]:
    """The sizes of ``urls`` when all are local files (a stat each), else [] (``suits_one_thread``
    then says no: elsewhere a size costs a request, and the threaded path suits large inputs)."""
    sizes = []
    for url in urls:
        fs, path = url_to_fs(url, storage_options)
        if not is_local(fs):
            return []
        try:
            sizes.append(os.stat(path).st_size)
        except OSError:  # not there (any more): the reader names the problem
            return []
    return sizes
