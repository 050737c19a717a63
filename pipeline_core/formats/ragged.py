"""Ragged batches: many variable-length 1-D sequences stored as one flat array plus offsets.

This is the contract between the tokenizer, the processors, the packer and the HDF5 writer:
sequence ``i`` is ``values[offsets[i]:offsets[i + 1]]``. It keeps a batch of a thousand rows in
two numpy arrays instead of a thousand Python lists, so every later step can work on whole
batches at once.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain

import numpy as np


@dataclass(frozen=True, slots=True)
class Ragged:
    """Variable-length sequences as one flat ``values`` array plus ``offsets`` (the shape of every key).

    Sequence ``i`` is ``values[offsets[i]:offsets[i + 1]]``; ``offsets`` is int64, starts at 0 and
    ends at ``len(values)``. Written to HDF5 as ``{key}`` and ``{key}_offsets``, so any sample is one
    slice.
    """

    values: np.ndarray  # 1-D, all sequences back to back
    offsets: np.ndarray  # int64, len(sequences) + 1, starts at 0, ends at len(values)

    @classmethod
    def from_lists(cls, seqs: Iterable[Sequence[int]] | Iterable[np.ndarray], dtype=np.int32) -> Ragged:
        arrays = [np.asarray(s, dtype=dtype) for s in seqs]
        lengths = np.fromiter((a.size for a in arrays), dtype=np.int64, count=len(arrays))
        values = np.concatenate(arrays) if arrays else np.zeros(0, dtype=dtype)
        return cls(values.astype(dtype, copy=False), offsets_from_lengths(lengths))

    @classmethod
    def from_id_lists(cls, id_lists: list[list[int]]) -> Ragged:
        """Token ids as Python lists (a tokenizer's batch output) to int32 values in one pass, with
        no array per sequence."""
        lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
        offsets = offsets_from_lengths(lengths)
        values = np.fromiter(chain.from_iterable(id_lists), dtype=np.int32, count=int(offsets[-1]))
        return cls(values, offsets)

    @classmethod
    def empty(cls, dtype=np.int32) -> Ragged:
        return cls(np.zeros(0, dtype=dtype), np.zeros(1, dtype=np.int64))

    def __len__(self) -> int:
        return self.offsets.size - 1

    def __getitem__(self, i: int) -> np.ndarray:
        return self.values[self.offsets[i] : self.offsets[i + 1]]

    @property
    def lengths(self) -> np.ndarray:
        return np.diff(self.offsets)

    def to_lists(self) -> list[list[int]]:
        return [self[i].tolist() for i in range(len(self))]

    def slice_rows(self, start: int, stop: int) -> Ragged:
        """Sequences ``start..stop-1`` without copying the values."""
        offsets = self.offsets[start : stop + 1]
        return Ragged(self.values[offsets[0] : offsets[-1]], offsets - offsets[0])

    def keep(self, mask: np.ndarray) -> Ragged:
        """The sequences where ``mask`` is True; no copy when all are kept."""
        mask = np.asarray(mask, dtype=bool)
        if bool(mask.all()):
            return self
        lengths = self.lengths
        # a boolean mask per value: one byte per item, cheaper than an int64 gather index
        return Ragged(self.values[np.repeat(mask, lengths)], offsets_from_lengths(lengths[mask]))

    def select(self, rows: np.ndarray) -> Ragged:
        """The sequences at positions ``rows`` (in that order), as a new Ragged."""
        rows = np.asarray(rows, dtype=np.int64)
        lengths = self.lengths[rows]
        starts = self.offsets[:-1][rows]
        return Ragged(self.values[gather_index(starts, lengths)], offsets_from_lengths(lengths))


def offsets_from_lengths(lengths: np.ndarray) -> np.ndarray:
    offsets = np.zeros(len(lengths) + 1, dtype=np.int64)
    np.cumsum(lengths, out=offsets[1:])
    return offsets


def gather_index(starts: np.ndarray, lengths: np.ndarray) -> np.ndarray:
    """Flat indices of the slices ``[s, s + n)`` for every (s, n), vectorised (int64).

    A running sum of steps that are 1 inside a slice and jump to the next slice's start: half
    the time of ``arange + repeat`` (one temporary of the output's size instead of two).
    """
    lengths = np.asarray(lengths, dtype=np.int64)
    nonempty = lengths > 0
    starts, lengths = np.asarray(starts, dtype=np.int64)[nonempty], lengths[nonempty]
    if lengths.size == 0:
        return np.zeros(0, dtype=np.int64)
    steps = np.ones(int(lengths.sum()), dtype=np.int64)
    steps[0] = starts[0]
    ends = starts[:-1] + lengths[:-1] - 1  # last index of each slice but the final one
    steps[np.cumsum(lengths[:-1])] = starts[1:] - ends
    return np.cumsum(steps, out=steps)


def concat_ragged(parts: Sequence[Ragged]) -> Ragged:
    """Row-wise concatenation: sequence i of the result is parts[0][i] + parts[1][i] + ...

    All parts must hold the same number of sequences. Vectorised, no per-row loop: every output
    item gets the number of the part it comes from (one byte), and each part fills its items
    through a boolean mask.
    """
    n = len(parts[0])
    if any(len(p) != n for p in parts):
        raise ValueError("concat_ragged: all parts must have the same number of sequences")
    lengths = np.stack([p.lengths for p in parts], axis=1)  # [n, k]
    out_offsets = offsets_from_lengths(lengths.sum(axis=1))
    dtype = np.result_type(*[p.values.dtype for p in parts])
    values = np.empty(int(out_offsets[-1]), dtype=dtype)
    part_ids = np.arange(len(parts), dtype=np.min_scalar_type(len(parts)))
    owner = np.repeat(np.tile(part_ids, n), lengths.ravel())
    for k, part in enumerate(parts):
        values[owner == k] = part.values
    return Ragged(values, out_offsets)


def wrap_rows(ragged: Ragged, prefix: np.ndarray, suffix: np.ndarray) -> Ragged:
    """Every sequence between ``prefix`` and ``suffix`` (a document between bos and eos): the same as
    ``concat_ragged([tile_rows(prefix, n), ragged, tile_rows(suffix, n)])``, in one pass over the
    values instead of one per part."""
    prefix, suffix = np.asarray(prefix), np.asarray(suffix)
    dtype = np.result_type(ragged.values.dtype, prefix.dtype, suffix.dtype)
    p, s = prefix.size, suffix.size
    offsets = ragged.offsets + np.arange(len(ragged) + 1, dtype=np.int64) * (p + s)
    values = np.empty(int(offsets[-1]), dtype=dtype)
    own = np.ones(values.size, dtype=bool)  # the slots of the sequences' own items
    for j in range(p):
        _fill(values, own, offsets[:-1] + j, prefix[j])
    for j in range(s):
        _fill(values, own, offsets[1:] - s + j, suffix[j])
    values[own] = ragged.values
    return Ragged(values, offsets)


def _fill(values: np.ndarray, own: np.ndarray, at: np.ndarray, value) -> None:
    values[at] = value
    own[at] = False


def tile_rows(seq: np.ndarray, n: int) -> Ragged:
    """The same sequence repeated as ``n`` rows (e.g. a format string shared by a batch)."""
    seq = np.asarray(seq)
    return Ragged(np.tile(seq, n), np.arange(n + 1, dtype=np.int64) * seq.size)
