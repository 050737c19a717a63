"""Streaming concat packing with document boundaries, in the layout of ``bfd.Packs``.

``SequencePacker`` lays documents end to end and cuts a pack every ``pack_size`` tokens, so a
document may continue in the next pack. Its packs carry no boundaries; this wrapper packs a
document-start flag in lockstep with the tokens and derives, per pack, ``position_ids`` and
``cu_seqlens`` from it. Layout (pack_size 8, documents A of 5 and B of 6 tokens, ``.`` = pad)::

    pack 0   A A A A A B B B        position_ids 0 1 2 3 4 0 1 2    cu_seqlens [0, 5, 8]
    pack 1   B B B . . . . .        position_ids 0 1 2 0 0 0 0 0    cu_seqlens [0, 3]

A continued piece (B in pack 1) restarts its positions at 0: attention cannot cross packs, so
each pack is a self-contained set of variable-length sequences for a varlen kernel, and position
ids never exceed ``pack_size``. ``sample_ids`` name the document of every piece (B's pieces share
one id). Pads are the token pad for the length key, False for masks and 0 for other keys.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pipeline_core.bfd import Packs
from pipeline_core.packing import SequencePacker
from pipeline_core.ragged import Ragged, offsets_from_lengths

_START = "__document_start"


class DocumentConcatPacker:
    def __init__(self, pack_size: int, pad_value: int, length_key: str) -> None:
        self.packer = SequencePacker(pack_size, pad_value)
        self.pack_size, self.length_key = pack_size, length_key
        self._documents = 0  # documents started in the packs emitted so far

    def add(self, samples: Mapping[str, Ragged]) -> Packs:
        starts = np.zeros(samples[self.length_key].values.size, dtype=bool)
        starts[samples[self.length_key].offsets[:-1][samples[self.length_key].lengths > 0]] = True
        full = self.packer.add({**samples, _START: starts})
        return self._packs(full, used_last=self.pack_size)

    def flush(self) -> Packs:
        before = self.packer.tokens
        tail = self.packer.flush()
        return self._packs(tail, used_last=self.packer.tokens - before)

    def _packs(self, rows: dict[str, np.ndarray], used_last: int) -> Packs:
        if _START not in rows:  # flushed before any sample
            return _no_packs(self.pack_size)
        starts = rows.pop(_START)
        used = np.full(starts.shape[0], self.pack_size, dtype=np.int64)
        if used.size:
            used[-1] = used_last
        for key, values in rows.items():
            _zero_pads(key, values, used, self.length_key)
        segment = starts.copy()
        segment[:, 0] |= used > 0  # a continued piece starts a segment at column 0
        sample_ids = (self._documents + np.cumsum(starts.ravel()) - 1)[np.flatnonzero(segment.ravel())]
        self._documents += int(starts.sum())
        cu_seqlens, cu_offsets = _cu_seqlens(segment, used)
        return Packs(rows, _position_ids(segment, used), cu_seqlens, cu_offsets, sample_ids.astype(np.int64))


def _no_packs(pack_size: int) -> Packs:
    none = np.zeros(0, dtype=np.int64)
    return Packs({}, np.zeros((0, pack_size), np.int32), np.zeros(0, np.int32), np.zeros(1, np.int64), none)


def _zero_pads(key: str, values: np.ndarray, used: np.ndarray, length_key: str) -> None:
    """SequencePacker pads every non-bool key with the token pad; other keys pad with 0."""
    if key != length_key and values.dtype != np.bool_ and used.size and used[-1] < values.shape[1]:
        values[-1, used[-1] :] = 0


def _position_ids(segment: np.ndarray, used: np.ndarray) -> np.ndarray:
    columns = np.arange(segment.shape[1], dtype=np.int64)
    last_start = np.maximum.accumulate(np.where(segment, columns, 0), axis=1)
    positions = (columns - last_start).astype(np.int32)
    positions[columns[None, :] >= used[:, None]] = 0
    return positions


def _cu_seqlens(segment: np.ndarray, used: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pack the segment starts then the used length: ``[0, ..., used]``, flat, plus offsets."""
    counts = segment.sum(axis=1)
    cu_offsets = offsets_from_lengths(counts + 1)
    cu_seqlens = np.empty(int(cu_offsets[-1]), dtype=np.int32)
    is_end = np.zeros(cu_seqlens.size, dtype=bool)
    is_end[cu_offsets[1:] - 1] = True
    cu_seqlens[is_end] = used
    cu_seqlens[~is_end] = np.nonzero(segment)[1]
    return cu_seqlens, cu_offsets
