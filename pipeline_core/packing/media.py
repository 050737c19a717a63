"""Per-sample keys (e.g. ``media``, UTF-8 JSON per sample) in packed outputs.

A pack holds several documents, so its value is the JSON list of its documents' values, in the
order of ``cu_seqlens`` (``null`` for a document without one)::

    media[p] = [<media of document 0>, <media of document 1>, ...]     (UTF-8 bytes, flat + offsets)

Under ``concat`` a document split across packs lists its media in every pack holding a piece of it.
Values wait here until their sample's pack is emitted: bounded by the packer's own buffer.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.packs import Packs


class PackMedia:
    def __init__(self, keys: list[str], pieces_continue: bool) -> None:
        self.keys = keys
        self.pieces_continue = pieces_continue  # concat: the last document of a pack may go on
        self._pending: dict[str, dict[int, bytes]] = {k: {} for k in keys}
        self._fed = 0

    def add(self, samples: dict[str, Ragged]) -> None:
        n = len(samples[self.keys[0]]) if self.keys else 0
        for key in self.keys:
            values = samples[key]
            for i in range(n):
                self._pending[key][self._fed + i] = values[i].tobytes()
        self._fed += n

    def take(self, packs: Packs) -> dict[str, Ragged]:
        """Per key, one JSON list per pack; forgets the samples whose documents are complete."""
        out = {
            key: Ragged.from_lists([self._pack_value(key, packs, p) for p in range(len(packs))], np.uint8)
            for key in self.keys
        }
        done = set(packs.sample_ids.tolist())
        if self.pieces_continue and packs.sample_ids.size:
            done.discard(int(packs.sample_ids[-1]))
        for pending in self._pending.values():
            for sample_id in done:
                pending.pop(sample_id, None)
        return out

    def _pack_value(self, key: str, packs: Packs, p: int) -> np.ndarray:
        values = [self._pending[key][int(i)] or b"null" for i in packs.sample_ids_of(p)]
        return np.frombuffer(b"[" + b",".join(values) + b"]", dtype=np.uint8)
