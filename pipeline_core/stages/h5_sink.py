"""The HDF5 output of the cache stage: unpacked, sentence-level or packed.

Unpacked, every key is flat + ``{key}_offsets`` with one item per sample. Sentence-level output
(``split_sentences``) has one ``sequence`` item per sentence plus ``document_offsets``: document
``d`` is sentences ``document_offsets[d]:document_offsets[d+1]``.

Packed, token-aligned keys are rows ``[n_packs, pack_size]`` and every pack also has::

    position_ids   int32 [n_packs, pack_size]  0 at every document start (and, under concat, at the
                                               start of a pack continuing a document), 0 on pads
    cu_seqlens     int32 flat + cu_seqlens_offsets: pack p's document boundaries
                   [0, end of doc 1, ..., end of last doc], pads after the last entry

With ``position_ids="derived"`` the per-token ``position_ids`` dataset is left out and readers
compute it from ``cu_seqlens`` (attribute ``position_ids_storage``, see ``formats.positions``).

Per-sample keys (``media``) are one JSON list per pack (see ``pack_media``). Deferred keys go
through a ``DeferredBuffer`` and reach the file only when fractional.

Token ids (each group's length key, ``sequence`` when packed) are stored as uint16 when the
vocabulary fits (vocab_size <= 65536, as Megatron's .bin does) and so does the pad value; packed
``position_ids`` likewise when pack_size <= 65536. ``load_h5`` and ``H5Dataset`` read them back
as int32 (see ``narrowed_keys``); other keys (masks, labels with -100) keep their dtype.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.formats.deferred import DeferredBuffer
from pipeline_core.formats.h5 import NARROW_IDS
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.keys import SENTENCE_LENGTHS, KeyLayout, sentence_items
from pipeline_core.formats.positions import PositionIds, position_dtype
from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.media import PackMedia
from pipeline_core.packing.packs import Packs
from pipeline_core.packing.stage import PackStage


class H5Sink:
    def __init__(
        self,
        writer: H5Writer,
        layout: KeyLayout,
        packer: PackStage | None,
        deferred_path: str,
        position_ids: PositionIds = "stored",
    ) -> None:
        self.writer, self.layout, self.packer = writer, layout, packer
        self.store_positions = position_ids == "stored"
        self.deferred = DeferredBuffer(deferred_path)
        self._deferred_names = {layout.packed_name(k) for k in layout.deferred} if packer else set(layout.deferred)
        self._media: PackMedia | None = None
        self.packs = self.packed_tokens = 0

    def write(self, samples: dict[str, Ragged]) -> None:
        if self.packer is not None:
            self._pack(samples)
        elif SENTENCE_LENGTHS in samples:
            sentences, per_document = sentence_items(samples)
            self.writer.append_ragged("sequence", sentences)
            self.writer.append_lengths("document_offsets", per_document)
        else:
            for key, ragged in samples.items():
                self._sink(key).append_ragged(key, ragged)

    def finish(self) -> list[str]:
        """Flush the last packs and copy the deferred keys worth keeping; returns those keys."""
        if self.packer is not None:
            self._write_packs(self.packer.flush())
        return self.deferred.copy_into(self.writer)

    def discard(self) -> None:
        self.deferred.discard()

    def _pack(self, samples: dict[str, Ragged]) -> None:
        if self._media is None:
            self._media = PackMedia(self.layout.per_sample(samples), not self.packer.whole_samples)
        self._media.add(samples)
        self._write_packs(self.packer.add({k: v for k, v in samples.items() if k in self.layout.aligned}))

    def _write_packs(self, packs: Packs) -> None:
        if not len(packs):
            return
        for key, rows in packs.arrays.items():
            self._sink(key).append_fixed(key, rows)
        if self.store_positions:  # else readers derive them from cu_seqlens (formats.positions)
            self.writer.append_fixed("position_ids", packs.position_ids)
        self.writer.append_ragged("cu_seqlens", Ragged(packs.cu_seqlens, packs.cu_offsets))
        if self._media is not None:
            for key, values in self._media.take(packs).items():
                self.writer.append_ragged(key, values)
        self.packs += len(packs)
        self.packed_tokens += int(used_tokens(packs).sum())

    def _sink(self, key: str):
        return self.deferred if key in self._deferred_names else self.writer


def used_tokens(packs: Packs) -> np.ndarray:
    """Real tokens per pack: the last cu_seqlens entry of each."""
    return packs.cu_seqlens[packs.cu_offsets[1:] - 1]


def narrowed_keys(layout: KeyLayout, vocab_size: int, pack_size: int, pad_value) -> dict[str, np.dtype]:
    """The keys the HDF5 stores as uint16 (see the module docstring)."""
    limit = np.iinfo(NARROW_IDS).max + 1
    if pack_size > 0:
        ids = layout.packed_id_keys()
        fits_pad = all(_pad_fits(pad_value, key, limit) for key in ids)
        narrow = {key: NARROW_IDS for key in ids} if vocab_size <= limit and fits_pad else {}
        if position_dtype(pack_size) == NARROW_IDS:  # the packers' own dtype: one rule for both
            narrow["position_ids"] = NARROW_IDS
        return narrow
    return {key: NARROW_IDS for key in layout.groups} if vocab_size <= limit else {}


def _pad_fits(pad_value, key: str, limit: int) -> bool:
    pad = pad_value.get(key) if isinstance(pad_value, dict) else pad_value
    return pad is None or 0 <= int(pad) < limit
