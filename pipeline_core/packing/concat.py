"""Streaming concat packing with document boundaries, in the layout of ``bfd.Packs``.

``SequencePacker`` lays documents end to end and cuts a pack every ``pack_size`` tokens, so a
document may continue in the next pack. Its packs carry no boundaries; this wrapper keeps the
start of every document as a position in the token stream and derives, per pack,
``position_ids`` and ``cu_seqlens`` from them. Layout (pack_size 8, documents A of 5 and B of 6
tokens, ``.`` = pad)::

    pack 0   A A A A A B B B        position_ids 0 1 2 3 4 0 1 2    cu_seqlens [0, 5, 8]
    pack 1   B B B . . . . .        position_ids 0 1 2 0 0 0 0 0    cu_seqlens [0, 3]

A continued piece (B in pack 1) restarts its positions at 0: attention cannot cross packs, so
each pack is a self-contained set of variable-length sequences for a varlen kernel, and position
ids never exceed ``pack_size``. ``sample_ids`` name the document of every piece (B's pieces share
one id). Pads are the token pad for the length key, False for masks and 0 for other keys.

Cost: the tokens are copied once (into the packs); the boundaries are small arrays, one item per
document or pack, and ``position_ids`` are one subtraction per token.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from pipeline_core.formats.positions import position_dtype, segment_positions
from pipeline_core.formats.ragged import Ragged, offsets_from_lengths
from pipeline_core.packing.packs import Packs
from pipeline_core.packing.sequence import SequencePacker


class DocumentConcatPacker:
    def __init__(self, pack_size: int, pad_value: int, length_key: str) -> None:
        self.packer = SequencePacker(pack_size, pad_value)
        self.pack_size, self.length_key = pack_size, length_key
        self._documents = 0  # documents started in the packs emitted so far
        self._pending_starts = np.zeros(0, dtype=np.int64)  # document starts in the packer's tail

    def add(self, samples: Mapping[str, Ragged]) -> Packs:
        ragged = samples[self.length_key]
        starts = ragged.offsets[:-1][ragged.lengths > 0] + self.packer.pending
        full = self.packer.add(samples)
        cut = len(next(iter(full.values()))) * self.pack_size
        return self._packs(full, self._take_starts(starts, cut), used_last=self.pack_size)

    def flush(self) -> Packs:
        used = self.packer.pending
        tail = self.packer.flush()
        return self._packs(tail, self._take_starts(np.zeros(0, dtype=np.int64), used), used_last=used)

    def _take_starts(self, new: np.ndarray, cut: int) -> np.ndarray:
        """The document starts before token ``cut`` (they go out now); keeps the rest for later."""
        starts = np.concatenate([self._pending_starts, new]) if self._pending_starts.size else new
        emitted = int(np.searchsorted(starts, cut))
        self._pending_starts = starts[emitted:] - cut
        return starts[:emitted]

    def _packs(self, rows: dict[str, np.ndarray], doc_starts: np.ndarray, used_last: int) -> Packs:
        n = len(next(iter(rows.values()))) if rows else 0
        if n == 0:
            return _no_packs(rows, self.pack_size)
        used = np.full(n, self.pack_size, dtype=np.int64)
        used[-1] = used_last
        for key, values in rows.items():
            _zero_pads(key, values, used, self.length_key)
        # a segment starts at every document start and at column 0 of every pack (continued pieces)
        segments = np.union1d(doc_starts, np.arange(n, dtype=np.int64) * self.pack_size)
        sample_ids = self._documents + np.searchsorted(doc_starts, segments, side="right") - 1
        self._documents += doc_starts.size
        positions = segment_positions(segments, n, self.pack_size, position_dtype(self.pack_size))
        positions[-1, used_last:] = 0  # the pads, all in the last pack
        cu_seqlens, cu_offsets = _cu_seqlens(segments, used, self.pack_size)
        return Packs(rows, positions, cu_seqlens, cu_offsets, sample_ids.astype(np.int64))


def _no_packs(rows: dict[str, np.ndarray], pack_size: int) -> Packs:
    none = np.zeros(0, dtype=np.int64)
    positions = np.zeros((0, pack_size), position_dtype(pack_size))
    return Packs(rows, positions, np.zeros(0, np.int32), np.zeros(1, np.int64), none)


def _zero_pads(key: str, values: np.ndarray, used: np.ndarray, length_key: str) -> None:
    """SequencePacker pads every non-bool key with the token pad; other keys pad with 0."""
    if key != length_key and values.dtype != np.bool_ and used[-1] < values.shape[1]:
        values[-1, used[-1] :] = 0


def _cu_seqlens(segments: np.ndarray, used: np.ndarray, pack_size: int) -> tuple[np.ndarray, np.ndarray]:
    """Per pack the segment starts then the used length: ``[0, ..., used]``, flat, plus offsets."""
    pack, column = np.divmod(segments, pack_size)
    cu_offsets = offsets_from_lengths(np.bincount(pack, minlength=used.size) + 1)
    cu_seqlens = np.empty(int(cu_offsets[-1]), dtype=np.int32)
    is_end = np.zeros(cu_seqlens.size, dtype=bool)
    is_end[cu_offsets[1:] - 1] = True
    cu_seqlens[is_end] = used
    cu_seqlens[~is_end] = column
    return cu_seqlens, cu_offsets
