"""Join per-chunk indexed datasets into one, as MindSpeed-LLM's ``--n-subs`` merge does.

Sequence ``j`` of input ``k`` becomes sequence ``S_0 + ... + S_{k-1} + j`` of the output; its
pointer moves by the byte size of the earlier .bin files and its document indices by the earlier
sequence counts. Everything streams in blocks of ``block_bytes``: the .bin files are copied, and
the index sections are read from memory maps and written section by section.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator, Sequence

import numpy as np

from pipeline_core.formats.megatron._publish import PairPaths, sync
from pipeline_core.formats.megatron.format import IndexHeader, pointer_blocks, write_index
from pipeline_core.formats.megatron.reader import IndexedReader, check_indexed

DEFAULT_BLOCK_BYTES = 64 << 20


def merge_indexed(
    prefixes: Sequence[str | os.PathLike],
    out_prefix: str | os.PathLike,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> IndexHeader:
    """Write ``out_prefix`` as the concatenation of ``prefixes`` (in order); returns its header."""
    sources = _open_sources(prefixes, os.fspath(out_prefix))
    out = PairPaths(os.fspath(out_prefix))
    try:
        _copy_bins(sources, out.bin_tmp, block_bytes)
        header = _write_merged_index(sources, out.idx_tmp, max(block_bytes // 8, 1))
        out.publish()
    except BaseException:
        out.discard()
        raise
    return header


def retyped_copy(
    source_prefix: str | os.PathLike,
    out_prefix: str | os.PathLike,
    dtype,
    *,
    block_bytes: int = DEFAULT_BLOCK_BYTES,
) -> IndexHeader:
    """Write ``out_prefix`` with ``source_prefix``'s sequences and documents, every value cast to
    ``dtype`` (a 0/1 loss mask as the float loss weight it stands in for); streamed in blocks."""
    source = check_indexed(source_prefix)
    dtype = np.dtype(dtype)
    header = IndexHeader(dtype, len(source), source.header.document_index_count)
    out = PairPaths(os.fspath(out_prefix))
    block = max(block_bytes // max(dtype.itemsize, source.dtype.itemsize), 1)
    try:
        with open(out.bin_tmp, "wb") as fh:
            for part in _blocks(source.values, block):
                fh.write(part.astype(dtype).tobytes())
            sync(fh)
        with open(out.idx_tmp, "wb") as fh:
            lengths = list(_blocks(source.sequence_lengths, block))
            write_index(fh, header, lengths, pointer_blocks(lengths, dtype.itemsize), [source.document_indices])
            sync(fh)
        out.publish()
    except BaseException:
        out.discard()
        raise
    return header


def _open_sources(prefixes: Sequence[str | os.PathLike], out_prefix: str) -> list[IndexedReader]:
    if not prefixes:
        raise ValueError("merge_indexed needs at least one input prefix")
    names = [os.fspath(p) for p in prefixes]
    if os.path.abspath(out_prefix) in {os.path.abspath(n) for n in names}:
        raise ValueError(f"out_prefix {out_prefix!r} is also an input; write the merge to a new prefix")
    sources = [check_indexed(name) for name in names]
    first = sources[0]
    for source in sources[1:]:
        if source.dtype != first.dtype:
            raise ValueError(
                f"{source.idx_path} stores {source.dtype.name} tokens but {first.idx_path} stores "
                f"{first.dtype.name}; re-export the chunks with one dtype (choose_dtype(vocab_size))"
            )
    return sources


def _copy_bins(sources: list[IndexedReader], path: str, block_bytes: int) -> None:
    with open(path, "wb") as out:
        for source in sources:
            with open(source.bin_path, "rb") as fh:
                shutil.copyfileobj(fh, out, block_bytes)
        sync(out)


def _write_merged_index(sources: list[IndexedReader], path: str, block: int) -> IndexHeader:
    header = IndexHeader(
        dtype=sources[0].dtype,
        sequence_count=sum(len(s) for s in sources),
        document_index_count=sum(s.document_count for s in sources) + 1,
    )
    with open(path, "wb") as fh:
        write_index(fh, header, _lengths(sources, block), _pointers(sources, block), _documents(sources, block))
        sync(fh)
    return header


def _lengths(sources: list[IndexedReader], block: int) -> Iterator[np.ndarray]:
    for source in sources:
        yield from _blocks(source.sequence_lengths, block)


def _pointers(sources: list[IndexedReader], block: int) -> Iterator[np.ndarray]:
    byte_offset = 0
    for source in sources:
        for part in _blocks(source.sequence_pointers, block):
            yield part + byte_offset
        byte_offset += os.path.getsize(source.bin_path)


def _documents(sources: list[IndexedReader], block: int) -> Iterator[np.ndarray]:
    yield np.zeros(1, dtype=np.int64)
    sequence_offset = 0
    for source in sources:
        for part in _blocks(source.document_indices[1:], block):
            yield part + sequence_offset
        sequence_offset += len(source)


def _blocks(array: np.ndarray, block: int) -> Iterator[np.ndarray]:
    for start in range(0, array.size, block):
        yield array[start : start + block]
