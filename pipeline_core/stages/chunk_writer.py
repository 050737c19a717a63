"""Fans the processed batches of one chunk out to its outputs (HDF5, Megatron) and keeps the counts.

Order of the end of a chunk, so the HDF5 stays the completion record: flush packs and copy the
deferred keys, finalize the Megatron files in staging, write the attributes, set ``complete``
last and close the HDF5, publish the Megatron files; the caller then publishes the HDF5.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np

from pipeline_core.formats.keys import SENTENCE_LENGTHS, KeyLayout
from pipeline_core.formats.megatron.output import MegatronSink
from pipeline_core.processors.base import ProcessedBatch
from pipeline_core.stages.h5_sink import H5Sink
from pipeline_core.stages.results import CacheStats

Fit = Callable[[ProcessedBatch], tuple[ProcessedBatch, int]]


class ChunkWriter:
    def __init__(
        self,
        layout: KeyLayout,
        stats: CacheStats,
        h5: H5Sink | None,
        megatron: MegatronSink | None,
        fit: Fit | None = None,
    ) -> None:
        self.layout, self.stats, self.h5, self.megatron, self._fit = layout, stats, h5, megatron, fit

    def fit(self, batch: ProcessedBatch) -> ProcessedBatch:
        """Move the samples the packer cannot take to ``batch.errors`` (see ``pack_stage.fit_batch``)."""
        if self._fit is None:
            return batch
        batch, cut = self._fit(batch)
        self.stats.pack_truncated += cut
        return batch

    def write(self, batch: ProcessedBatch) -> None:
        self.stats.samples_written += batch.n_samples
        self.stats.rows_written += written_rows(batch)
        self.stats.rows_truncated += batch.truncated
        for length_key in self.layout.groups:
            self.stats.tokens_written += int(batch.samples[length_key].offsets[-1])
        if SENTENCE_LENGTHS in batch.samples:
            self.stats.sentences_written += batch.samples[SENTENCE_LENGTHS].values.size
        for sink in (self.h5, self.megatron):
            if sink is not None:
                sink.write(batch.samples)

    def finish(self) -> None:
        if self.h5 is not None:
            self.stats.deferred_keys = self.h5.finish()
        if self.megatron is not None:
            self.megatron.finish()
            self.stats.megatron_keys = self.megatron.kept_keys()
        self._pack_counts()

    def close(self, attrs: dict) -> None:
        """Attributes, then ``complete``, then the Megatron files (see the module docstring)."""
        if self.h5 is not None:
            # the keys this file holds (deferred keys only when kept; packed DPO keys renamed)
            self.h5.writer.set_attrs({**attrs, "keys": self.h5.writer.data_keys()})
            self.h5.writer.close(complete=True)
        if self.megatron is not None:
            self.stats.megatron_prefixes = self.megatron.publish()

    def discard(self) -> None:
        if self.h5 is not None:
            self.h5.discard()
            if self.h5.writer.file.id.valid:
                self.h5.writer.close(complete=False)
        if self.megatron is not None:
            self.megatron.discard()

    def _pack_counts(self) -> None:
        """From the sink that packs: the HDF5, else MindSpeed's (output_format mindspeed writes no HDF5)."""
        sink = next((s for s in (self.h5, self.megatron) if getattr(s, "packer", None) is not None), None)
        if sink is None:
            return
        size = self.stats.pack_size
        self.stats.packs = sink.packs
        self.stats.pad_tokens = sink.packs * size - sink.packed_tokens
        self.stats.lower_bound_packs = math.ceil(sink.packed_tokens / size)
        self.stats.untrained_packs = sink.packer.untrained_packs


def written_rows(batch: ProcessedBatch) -> int:
    """Rows of the batch that kept at least one sample (a row may keep several: ``rewritten="per_turn"``)."""
    return int(np.unique(batch.rows).size)
