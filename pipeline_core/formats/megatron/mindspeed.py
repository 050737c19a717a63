"""MindSpeed-LLM's instruction layout, written by the cache stage for ``output_format='mindspeed'``.

MindSpeed-LLM's ``preprocess_data.py`` (its instruction handlers) writes three indexed datasets
per output prefix, which its fine-tuning loader opens together::

    {stem}_packed_input_ids_document        token ids
    {stem}_packed_attention_mask_document   1 on every position (MindSpeed's default, not neat_pack)
    {stem}_packed_labels_document           the ids, -100 where no loss is taken

all int32 (labels hold -100), one sequence and one document per item: a sample unpacked, or with
``pack_size`` a pack of exactly ``pack_size`` tokens (its padding has label -100, as MindSpeed's
``--pack`` pads). The training ``--data-path`` is the prefix ``{stem}`` (or the merged one).
Only ``sequence`` + ``loss_mask`` processors fit (sft, messages); fractional ``loss_weight`` has
no place in the layout and is refused.
"""

from __future__ import annotations

import os
import shutil

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.deferred import is_fractional
from pipeline_core.formats.keys import KeyLayout
from pipeline_core.formats.megatron.output import _staging_dir, megatron_name, publish_pair
from pipeline_core.formats.megatron.writer import IndexedWriter
from pipeline_core.formats.ragged import Ragged
from pipeline_core.storage.fs import join_url

IGNORE_INDEX = -100
KEYS = ("packed_input_ids", "packed_attention_mask", "packed_labels")


class MindSpeedSink:
    """The three MindSpeed datasets of one chunk; ``packer`` (None: unpacked) builds the packs."""

    def __init__(
        self, output_dir: str, stem: str, layout: KeyLayout, packer=None, storage_options: dict | None = None
    ) -> None:
        if "sequence" not in layout.groups or "loss_mask" not in layout.groups["sequence"]:
            raise ConfigError(
                f"output_format 'mindspeed' writes MindSpeed-LLM's instruction layout (input_ids, attention_mask, "
                f"labels) from sequence + loss_mask; this processor writes {sorted(layout.groups)}: use sft or messages"
            )
        self.output_dir, self.stem, self.packer, self.storage_options = str(output_dir), stem, packer, storage_options
        self.layout = layout
        self.staging = _staging_dir(self.output_dir, stem, storage_options)
        self._writers = {k: IndexedWriter(os.path.join(self.staging, megatron_name(stem, k)), np.int32) for k in KEYS}
        self.packs = self.packed_tokens = 0  # packed: what the packs hold, for the chunk's pack counts

    def write(self, samples: dict[str, Ragged]) -> None:
        """Add a batch's samples (or, packed, the packs they complete)."""
        weights = samples.get("loss_weight")
        if weights is not None and is_fractional(weights.values):
            raise ConfigError("MindSpeed's layout has no per-token loss weights; use output_format hdf5 to keep them")
        if self.packer is None:
            self._add(samples["sequence"].values, samples["loss_mask"].values, samples["sequence"].lengths)
            return
        self._add_packs(self.packer.add({k: v for k, v in samples.items() if k in self.layout.aligned}))

    def finish(self) -> None:
        """Write the last packs and finalize the three datasets in staging."""
        if self.packer is not None:
            self._add_packs(self.packer.flush())
        for writer in self._writers.values():
            writer.finalize()

    def kept_keys(self) -> list[str]:
        """The file keys published: always the three of the layout."""
        return list(KEYS)

    def publish(self) -> dict[str, str]:
        """Move the three pairs to the output folder; {key: prefix URL}."""
        published = {}
        for key in KEYS:
            name = megatron_name(self.stem, key)
            published[key] = join_url(self.output_dir, name)
            publish_pair(os.path.join(self.staging, name), published[key], self.storage_options)
        self.discard()
        return published

    def discard(self) -> None:
        """Drop the staging files (after ``publish`` only what is left over)."""
        for writer in self._writers.values():
            writer.abort()
        shutil.rmtree(self.staging, ignore_errors=True)

    def _add_packs(self, packs) -> None:
        if not len(packs):
            return
        ids, mask = packs.arrays["sequence"], packs.arrays["loss_mask"]
        self.packs += len(packs)
        self.packed_tokens += int(packs.cu_seqlens[packs.cu_offsets[1:] - 1].sum())
        self._add(ids.reshape(-1), mask.reshape(-1), np.full(ids.shape[0], ids.shape[1], dtype=np.int64))

    def _add(self, ids: np.ndarray, mask: np.ndarray, lengths: np.ndarray) -> None:
        ids = ids.astype(np.int32)
        labels = np.where(mask.astype(bool), ids, np.int32(IGNORE_INDEX)).astype(np.int32)
        self._writers["packed_input_ids"].add_sequences(ids, lengths)
        self._writers["packed_attention_mask"].add_sequences(np.ones_like(ids), lengths)
        self._writers["packed_labels"].add_sequences(labels, lengths)
