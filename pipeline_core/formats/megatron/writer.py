"""Streaming writer for one Megatron indexed dataset (``{prefix}.bin`` + ``{prefix}.idx``).

Tokens go straight to ``{prefix}.bin.tmp`` batch by batch; only the per-sequence lengths and the
document boundaries (4 + 8 bytes a sequence) stay in memory until ``finalize()`` writes the index
and publishes the pair (see ``_publish``).
"""

from __future__ import annotations

import os

import numpy as np

from pipeline_core.formats.megatron._publish import PairPaths, sync
from pipeline_core.formats.megatron.format import (
    IndexHeader,
    pointer_blocks,
    token_dtype,
    write_index,
)

_MAX_LENGTH = np.iinfo(np.int32).max


class IndexedWriter:
    """Write sequences given as a flat token array plus lengths, vectorised per batch.

    Documents: with ``document_per_sequence=True`` (the default, Megatron's preprocessing without
    sentence splitting) each sequence from ``add_sequences`` is its own document. With ``False``
    sequences stay in an open document until ``end_document()``. ``add_document`` always appends
    its sequences to the open document and closes it, e.g. the sentences of one text (none: an
    empty document).
    ``finalize()`` closes a document left open.

    Use as a context manager: leaving the block normally finalizes, an exception discards the
    temporary files. A dataset without a single token is still written (an empty chunk merges
    fine), but megatron-core cannot open it: numpy refuses to memory-map an empty .bin.
    """

    def __init__(self, path_prefix: str | os.PathLike, dtype, *, document_per_sequence: bool = True) -> None:
        self.dtype = token_dtype(dtype)
        self.document_per_sequence = document_per_sequence
        self._paths = PairPaths(os.fspath(path_prefix))
        os.makedirs(os.path.dirname(os.path.abspath(self._paths.bin)), exist_ok=True)
        # Open for the writer's whole life; finalize() or abort() closes it.
        self._bin = open(self._paths.bin_tmp, "wb")  # noqa: SIM115
        self._lengths: list[np.ndarray] = []
        self._documents: list[np.ndarray] = [np.zeros(1, dtype=np.int64)]
        self._sequence_count = 0
        self._closed_count = 0  # sequences before the last document boundary
        self._finished = False

    @property
    def sequence_count(self) -> int:
        return self._sequence_count

    @property
    def document_count(self) -> int:
        return sum(block.size for block in self._documents) - 1

    def add_sequences(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        first = self._append(flat, lengths)
        if self.document_per_sequence:
            self._documents.append(np.arange(first + 1, self._sequence_count + 1, dtype=np.int64))
            self._closed_count = self._sequence_count

    def add_document(self, flat: np.ndarray, lengths: np.ndarray) -> None:
        """Append ``lengths`` sequences to the open document and close it: a document even with no
        sequence (a text whose sentences all came out empty), as megatron-core's builder and
        Megatron-LM's preprocess_data write it, so documents stay aligned with the HDF5 output."""
        self._append(flat, lengths)
        self._close_document()

    def end_document(self) -> None:
        """Close the open document; does nothing when no sequence was added since the last one."""
        if self._sequence_count > self._closed_count:
            self._close_document()

    def _close_document(self) -> None:
        self._documents.append(np.array([self._sequence_count], dtype=np.int64))
        self._closed_count = self._sequence_count

    def finalize(self) -> None:
        """Write the .idx and publish both files; the .idx appears last."""
        self._check_open()
        self.end_document()
        try:
            sync(self._bin)
            self._bin.close()
            self._write_index()
            self._paths.publish()
        except BaseException:
            self.abort()
            raise
        self._finished = True

    def abort(self) -> None:
        """Close and delete the temporary files; nothing is published."""
        self._bin.close()
        self._paths.discard()
        self._finished = True

    def __enter__(self) -> IndexedWriter:
        return self

    def __exit__(self, exc_type, exc, tb) -> None:
        if exc_type is not None:
            self.abort()
        elif not self._finished:
            self.finalize()

    def _append(self, flat: np.ndarray, lengths: np.ndarray) -> int:
        self._check_open()
        tokens, lengths = _checked_batch(flat, lengths, self.dtype)
        self._bin.write(tokens.tobytes())
        self._lengths.append(lengths)
        first = self._sequence_count
        self._sequence_count += lengths.size
        return first

    def _write_index(self) -> None:
        header = IndexHeader(self.dtype, self._sequence_count, self.document_count + 1)
        with open(self._paths.idx_tmp, "wb") as fh:
            pointers = pointer_blocks(self._lengths, self.dtype.itemsize)
            write_index(fh, header, self._lengths, pointers, self._documents)
            sync(fh)

    def _check_open(self) -> None:
        if self._finished:
            raise ValueError(f"writer for {self._paths.prefix!r} is already finalized or aborted; open a new one")


def _checked_batch(flat, lengths, dtype: np.dtype) -> tuple[np.ndarray, np.ndarray]:
    flat = np.asarray(flat)
    lengths = np.asarray(lengths)
    if flat.ndim != 1 or lengths.ndim != 1:
        raise ValueError(f"flat and lengths must be 1-D, got shapes {flat.shape} and {lengths.shape}")
    if lengths.size and (lengths.dtype.kind not in "iu" or lengths.min() < 0 or lengths.max() > _MAX_LENGTH):
        raise ValueError("lengths must be non-negative integers below 2**31 (Megatron stores them as int32)")
    if int(lengths.sum()) != flat.size:
        raise ValueError(f"lengths add up to {int(lengths.sum())} but flat holds {flat.size} tokens")
    _check_fits(flat, dtype)
    return flat.astype(dtype, copy=False), lengths.astype(np.int32, copy=False)


def _check_fits(flat: np.ndarray, dtype: np.dtype) -> None:
    if dtype.kind not in "iu" or flat.size == 0:
        return
    if flat.dtype.kind not in "iub":
        raise ValueError(f"tokens have dtype {flat.dtype.name}; integer token ids are needed for {dtype.name}")
    info = np.iinfo(dtype)
    low, high = int(flat.min()), int(flat.max())
    if low < info.min or high > info.max:
        raise ValueError(
            f"token ids span [{low}, {high}], outside {dtype.name}'s range [{info.min}, {info.max}]; "
            "pick the dtype with choose_dtype(vocab_size) using the tokenizer's full vocab size"
        )
