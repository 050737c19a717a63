"""Packs and PackStats: what either packer emits, and the counts it keeps.

A pack is one fixed-length row; ``Packs`` holds many in emission order, with each pack's
document boundaries (``cu_seqlens``), per-token position ids and the source sample of each
document (see ``packing.bfd`` for a drawn example).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from pipeline_core.formats.ragged import gather_index


def position_ids_from_lengths(lengths: np.ndarray) -> np.ndarray:
    """``[0..l0-1, 0..l1-1, ...]`` as int32, vectorised: every document's slice starts at 0."""
    lengths = np.asarray(lengths, dtype=np.int64)
    return gather_index(np.zeros(lengths.size, dtype=np.int64), lengths).astype(np.int32)


@dataclass(frozen=True, slots=True, eq=False)
class Packs:
    """Packs in emission order. Pack ``p`` has documents ``cu_seqlens_of(p)`` (token offsets in
    the row) and ``sample_ids_of(p)``; tokens after the last offset are padding."""

    arrays: dict[str, np.ndarray]  # key -> [n_packs, pack_size]
    position_ids: np.ndarray  # [n_packs, pack_size], 0 on pads; uint16 or int32 (formats.positions.position_dtype)
    cu_seqlens: np.ndarray  # int32, flat over packs
    cu_offsets: np.ndarray  # int64 [n_packs + 1] into cu_seqlens
    sample_ids: np.ndarray  # int64, one per document: the sample's position in the input stream

    def __len__(self) -> int:
        return self.cu_offsets.size - 1

    @property
    def doc_offsets(self) -> np.ndarray:
        """Offsets into ``sample_ids``: each pack has one more cu_seqlens entry than documents."""
        return self.cu_offsets - np.arange(self.cu_offsets.size)

    def cu_seqlens_of(self, p: int) -> np.ndarray:
        return self.cu_seqlens[self.cu_offsets[p] : self.cu_offsets[p + 1]]

    def sample_ids_of(self, p: int) -> np.ndarray:
        offsets = self.doc_offsets
        return self.sample_ids[offsets[p] : offsets[p + 1]]

    @classmethod
    def concat(cls, parts: Sequence[Packs]) -> Packs:
        # Empty parts may predate the first sample and so lack the keys: leave them out.
        parts = [p for p in parts if len(p)] or list(parts[-1:])
        if len(parts) == 1:
            return parts[0]
        bases = np.cumsum([0] + [p.cu_offsets[-1] for p in parts[:-1]])
        return cls(
            arrays={k: np.concatenate([p.arrays[k] for p in parts]) for k in parts[0].arrays},
            position_ids=np.concatenate([p.position_ids for p in parts]),
            cu_seqlens=np.concatenate([p.cu_seqlens for p in parts]),
            cu_offsets=np.concatenate([[0]] + [p.cu_offsets[1:] + b for p, b in zip(parts, bases, strict=True)]),
            sample_ids=np.concatenate([p.sample_ids for p in parts]),
        )


@dataclass(slots=True)
class PackStats:
    pack_size: int
    samples: int = 0  # samples fed
    packed_samples: int = 0  # samples in emitted packs
    tokens: int = 0  # real tokens in emitted packs
    packs: int = 0
    truncated: int = 0
    dropped: dict[str, int] = field(default_factory=dict)  # reason -> count

    @property
    def utilisation(self) -> float:
        return self.tokens / (self.packs * self.pack_size) if self.packs else 0.0

    @property
    def lower_bound_packs(self) -> int:
        """No packer can use fewer packs than this for the same tokens."""
        return math.ceil(self.tokens / self.pack_size)

    def drop(self, reason: str) -> None:
        self.dropped[reason] = self.dropped.get(reason, 0) + 1
