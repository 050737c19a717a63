"""The packing step of the cache stage: ``concat`` (streaming, may split samples) or ``bfd``.

Both turn batches of token-aligned keys into ``bfd.Packs`` (rows, position_ids, cu_seqlens,
sample_ids). ``fit_batch`` runs first, on the processed batch, so samples the packer cannot take
become ordinary skipped rows (with file and line, counted by reason): empty samples always, and
under ``bfd`` samples longer than ``pack_size``, which follow the processor's ``overflow``:
``truncate`` cuts a single-sequence sample to ``pack_size``; ``drop``, and any over-long DPO pair
(its documents must share a pack and cannot be cut fairly), skip the sample.
"""

from __future__ import annotations

from typing import Literal, Protocol

import numpy as np

from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.keys import KeyLayout
from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.bfd import BfdPacker
from pipeline_core.packing.concat import DocumentConcatPacker
from pipeline_core.packing.packs import Packs, PackStats
from pipeline_core.processors.base import ProcessedBatch
from pipeline_core.processors.conversation import first_true
from pipeline_core.processors.length import truncate
from pipeline_core.processors.turns import named

Packing = Literal["concat", "bfd"]


class PackStage(Protocol):
    whole_samples: bool  # True if no sample is ever split across packs
    untrained_packs: int  # packs emitted so far whose labels are all -100 (``untrained``)

    def add(self, samples: dict[str, Ragged]) -> Packs: ...

    def flush(self) -> Packs: ...


class ConcatStage:
    """Concat packing; counts the packs that hold no trained token (``untrained_packs``).

    A sample with nothing to train never reaches a packer (``nothing_to_train``), but cutting the
    stream every ``pack_size`` tokens can leave a pack holding only the prompt of a long sample, or
    trained tokens only at column 0 (the end of an answer continued there): its labels are all
    -100 (``trained_labels``), so a batch made only of such packs has a NaN mean loss. The pack
    is kept (dropping it would change the stream a user asked for) and counted."""

    whole_samples = False

    def __init__(self, layout: KeyLayout, pack_size: int, pad_value: int) -> None:
        if len(layout.groups) > 1:
            raise ConfigError(
                f"this processor writes {len(layout.groups)} sequence groups ({', '.join(layout.groups)}); "
                "streaming-concat packing would separate them: use packing='bfd' (a pair shares a pack) or pack_size=0"
            )
        [length_key] = layout.groups
        self.packer = DocumentConcatPacker(pack_size, pad_value, length_key)
        self.untrained_packs = 0

    def add(self, samples: dict[str, Ragged]) -> Packs:
        return self._counted(self.packer.add(samples))

    def flush(self) -> Packs:
        return self._counted(self.packer.flush())

    def _counted(self, packs: Packs) -> Packs:
        self.untrained_packs += untrained(packs)
        return packs


def untrained(packs: Packs) -> int:
    """Packs whose labels are all -100: no mask bit set but at segment starts (``trained_labels``)."""
    masks = [rows for rows in packs.arrays.values() if rows.dtype == np.bool_]
    if not masks or not len(packs):
        return 0
    return int(np.count_nonzero(~trained_labels(masks[0], packs).any(axis=1)))


def trained_labels(mask: np.ndarray, packs: Packs) -> np.ndarray:
    """The mask bits a trainer trains on: none at a segment start (every document, and a piece
    continued at column 0), where the labels are -100 (``loader.collate``, as transformers'
    DataCollatorWithFlattening; nothing in the pack predicts that token)."""
    is_last = np.zeros(packs.cu_seqlens.size, dtype=bool)
    is_last[packs.cu_offsets[1:] - 1] = True
    pack_of = np.repeat(np.arange(len(packs)), np.diff(packs.cu_offsets))
    trained = mask.copy()
    trained[pack_of[~is_last], packs.cu_seqlens[~is_last]] = False
    return trained


class BfdStage:
    """bfd packing; counts untrained packs as ``ConcatStage`` does (whole samples, each with a
    trained token, make one only when that token is the sample's first)."""

    whole_samples = True

    def __init__(self, layout: KeyLayout, pack_size: int, pad_value: int, window: int) -> None:
        self.groups = layout.pack_groups()
        lengths = {out for group in self.groups for out, key in group.items() if key in layout.groups}
        pads = {out: pad_value if out in lengths else 0 for out in self.groups[0]}
        self.packer = BfdPacker(pack_size, pads, window=window, overflow="raise", groups=self.groups)
        self.untrained_packs = 0

    def add(self, samples: dict[str, Ragged]) -> Packs:
        keys = [key for group in self.groups for key in group.values()]
        n = len(samples[keys[0]])
        packs = self.packer.add({k: samples[k][i] for k in keys} for i in range(n))
        self.untrained_packs += untrained(packs)
        return packs

    def flush(self) -> Packs:
        packs = self.packer.flush()
        self.untrained_packs += untrained(packs)
        return packs


def make_pack_stage(layout: KeyLayout, packing: str, pack_size: int, pad_value: int, window: int) -> PackStage:
    if packing == "concat":
        return ConcatStage(layout, pack_size, pad_value)
    if packing == "bfd":
        return BfdStage(layout, pack_size, pad_value, window)
    raise ConfigError(f"packing={packing!r} is unknown; choose 'concat' or 'bfd'")


def fit_batch(
    batch: ProcessedBatch, layout: KeyLayout, pack_size: int, overflow: str, whole_samples: bool
) -> tuple[ProcessedBatch, int]:
    """(the batch without the samples a packer cannot take, number of samples cut to pack_size)."""
    if batch.n_samples == 0:
        return batch, 0
    lengths = np.stack([batch.samples[k].lengths for k in layout.groups], axis=1)  # [n, groups]
    total = lengths.sum(axis=1)
    too_long = (total > pack_size) if whole_samples else np.zeros(batch.n_samples, dtype=bool)
    cut = too_long & (overflow == "truncate") & (lengths.shape[1] == 1)
    # cut to pack_size, a sample whose prompt fills it would keep no trained token
    prompts = np.zeros(batch.n_samples, dtype=np.int64)
    if cut.any():
        prompts = batch.prompt_lengths if batch.prompt_lengths is not None else _prompt_lengths(batch, layout)
    untrained = cut & (prompts >= pack_size)
    cut &= ~untrained
    drop = (lengths.min(axis=1, initial=1) == 0) | (too_long & ~cut)
    if not drop.any() and not cut.any():
        return batch, 0
    samples = {k: _cut(v, pack_size) if k in layout.aligned and cut.any() else v for k, v in batch.samples.items()}
    errors = []
    for i in np.flatnonzero(drop):
        why = _why(lengths[i], pack_size, int(prompts[i]) if untrained[i] else None)
        errors.append((int(batch.rows[i]), named(why, batch.turns, i)))
    kept = ~drop
    fitted = ProcessedBatch(
        {k: v.keep(kept) for k, v in samples.items()},
        batch.rows[kept],
        sorted(batch.errors + errors, key=lambda e: e[0]),
        batch.truncated,
        None if batch.turns is None else batch.turns[kept],
        None if batch.prompt_lengths is None else batch.prompt_lengths[kept],
    )
    return fitted, int(cut.sum())


def _cut(ragged: Ragged, pack_size: int) -> Ragged:
    return truncate(ragged, np.full(len(ragged), pack_size))


def _prompt_lengths(batch: ProcessedBatch, layout: KeyLayout) -> np.ndarray:
    """Per sample, the tokens before its first trained one (0 without a mask: everything trains)."""
    [keys] = layout.groups.values() if len(layout.groups) == 1 else [()]
    masks = [k for k in keys if k in batch.samples and batch.samples[k].values.dtype == np.bool_]
    return first_true(batch.samples[masks[0]]) if masks else np.zeros(batch.n_samples, dtype=np.int64)


def _why(lengths: np.ndarray, pack_size: int, prompt: int | None = None) -> RowError:
    if prompt is not None:
        return RowError(
            "prompt_too_long",
            f"the prompt alone has {prompt} tokens >= pack_size {pack_size}, so cut to pack_size (overflow="
            "'truncate') the sample would keep no trained token; raise pack_size or set max_length",
        )
    if lengths.min() == 0:
        return RowError("empty_sample", "the sample has no tokens, so there is nothing to pack")
    if lengths.size > 1:
        parts = "+".join(str(int(n)) for n in lengths)
        return RowError(
            "pair_too_long_for_pack",
            f"the pair has {parts} = {int(lengths.sum())} tokens > pack_size {pack_size}; both documents of a pair "
            "share one pack: raise pack_size or set max_length so long pairs are cut before packing",
        )
    return RowError(
        "too_long_for_pack",
        f"the sample has {int(lengths[0])} tokens > pack_size {pack_size}; bfd never splits a sample: raise "
        "pack_size, set overflow='truncate', or use packing='concat'",
    )


def pack_stats(packs: int, tokens: int, pack_size: int) -> dict:
    stats = PackStats(pack_size, tokens=tokens, packs=packs)
    return {"pack_fill": stats.utilisation, "lower_bound_packs": stats.lower_bound_packs}
