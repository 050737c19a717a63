"""A small memory-mapped reader for Megatron indexed datasets, plus a consistency check.

It exists so our tests and ``verify`` steps do not need megatron-core (and torch) installed; it
reads nothing into memory beyond what is indexed.
"""

from __future__ import annotations

import os

import numpy as np

from pipeline_core.formats.megatron.format import (
    DOCUMENT_DTYPE,
    LENGTH_DTYPE,
    POINTER_DTYPE,
    IndexHeader,
    bin_path,
    idx_path,
)


class IndexedReader:
    """``reader[i]`` is sequence ``i`` as a read-only array; document ``d`` is sequences
    ``document_indices[d]:document_indices[d + 1]``."""

    def __init__(self, path_prefix: str | os.PathLike) -> None:
        self.path_prefix = os.fspath(path_prefix)
        self.idx_path = idx_path(self.path_prefix)
        self.bin_path = bin_path(self.path_prefix)
        for path in (self.idx_path, self.bin_path):
            if not os.path.exists(path):
                raise FileNotFoundError(f"{path} not found; was the dataset at {self.path_prefix!r} finalized?")
        self.header = IndexHeader.read(self.idx_path)
        self._check_index_size()
        self.sequence_lengths = self._index_array(LENGTH_DTYPE, self.header.sequence_count, self.header.lengths_offset)
        self.sequence_pointers = self._index_array(
            POINTER_DTYPE, self.header.sequence_count, self.header.pointers_offset
        )
        self.document_indices = self._index_array(
            DOCUMENT_DTYPE, self.header.document_index_count, self.header.documents_offset
        )
        self._tokens = _map(self.bin_path, self.dtype, os.path.getsize(self.bin_path) // self.dtype.itemsize, 0)

    @property
    def dtype(self) -> np.dtype:
        return self.header.dtype

    @property
    def values(self) -> np.ndarray:
        """Every sequence's values back to back: the whole .bin, memory-mapped."""
        return self._tokens

    @property
    def document_count(self) -> int:
        return max(self.header.document_index_count - 1, 0)

    def __len__(self) -> int:
        return self.header.sequence_count

    def __getitem__(self, i: int) -> np.ndarray:
        if not -len(self) <= i < len(self):
            raise IndexError(f"sequence {i} out of range for {len(self)} sequences")
        start = int(self.sequence_pointers[i]) // self.dtype.itemsize
        return self._tokens[start : start + int(self.sequence_lengths[i])]

    def document(self, d: int) -> list[np.ndarray]:
        lo, hi = int(self.document_indices[d]), int(self.document_indices[d + 1])
        return [self[i] for i in range(lo, hi)]

    def _index_array(self, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
        return _map(self.idx_path, dtype, count, offset)

    def _check_index_size(self) -> None:
        size = os.path.getsize(self.idx_path)
        if size < self.header.index_size:
            raise ValueError(
                f"{self.idx_path}: {size} bytes but the header promises {self.header.index_size}; "
                "the index is truncated, re-run the export"
            )


def check_indexed(path_prefix: str | os.PathLike) -> IndexedReader:
    """Open the dataset and verify the index against the .bin; raise ValueError on the first problem."""
    reader = IndexedReader(path_prefix)
    problems = index_problems(
        reader.header,
        reader.sequence_lengths,
        reader.sequence_pointers,
        reader.document_indices,
        os.path.getsize(reader.bin_path),
    )
    if problems:
        raise ValueError(f"{reader.path_prefix}: {problems[0]}; re-run the export")
    return reader


def index_problems(
    header: IndexHeader, lengths: np.ndarray, pointers: np.ndarray, documents: np.ndarray, bin_size: int
) -> list[str]:
    """What is wrong with an index's arrays and its .bin's size (empty when nothing is): documents
    run from 0 to the sequence count without going back, sequences lie back to back and fill the
    .bin exactly, as Megatron's reader assumes without checking."""
    lengths = np.asarray(lengths).astype(np.int64)
    itemsize = header.dtype.itemsize
    bin_expected = int(lengths.sum()) * itemsize
    expected = np.concatenate([[0], np.cumsum(lengths)[:-1]]) * itemsize if lengths.size else lengths
    checks = [
        (documents.size == 0 or documents[0] != 0, "document indices must start with 0"),
        (bool(np.any(np.diff(documents) < 0)), "document indices must not decrease"),
        (
            documents.size > 0 and documents[-1] != header.sequence_count,
            "the last document index must equal the sequence count",
        ),
        (bool(np.any(lengths < 0)), "sequence lengths must be non-negative"),
        (not np.array_equal(pointers, expected), "sequence pointers are not back to back"),
        (bin_size != bin_expected, f".bin has {bin_size} bytes, the index needs {bin_expected}"),
    ]
    return [message for failed, message in checks if failed]


def _map(path: str, dtype: np.dtype, count: int, offset: int) -> np.ndarray:
    if count == 0:
        return np.zeros(0, dtype=dtype)  # numpy cannot map zero bytes
    return np.memmap(path, dtype=dtype, mode="r", shape=(count,), offset=offset)
