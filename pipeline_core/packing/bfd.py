"""Best-fit-decreasing (BFD) packing of whole samples into fixed-length packs.

Unlike the streaming-concat packer (``packing.SequencePacker``) no sample is ever split: each
sample goes whole into the fullest pack that still has room for it. Memory stays bounded on a
stream: samples are packed ``window`` at a time (longest first), and after each window every pack
is emitted except the ``keep_open`` emptiest ones, which can still take samples of the next window.

A sample is a dict of aligned 1-D arrays (``sequence`` + ``loss_mask``). With ``groups`` a sample
holds several documents that must share a pack, e.g. a DPO pair (see ``DPO_GROUPS``): each group
maps output keys to sample keys, and the group documents are laid out one after the other.
Layout of one pack (pack_size 12, sample A of 3 tokens, then a DPO pair c=4, r=3; ``.`` = pad)::

    sequence      A A A c c c c r r r . .
    loss_mask     (per token, pads False)
    position_ids  0 1 2 0 1 2 3 0 1 2 0 0
    cu_seqlens    [0, 3, 7, 10]          -- starts with 0, one end per document, pads excluded
    sample_ids    [0, 1, 1]              -- source sample of each document
"""

from __future__ import annotations

from bisect import bisect_left, insort
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal, get_args

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.positions import position_dtype
from pipeline_core.formats.ragged import gather_index, offsets_from_lengths
from pipeline_core.packing.packs import Packs, PackStats, position_ids_from_lengths

Overflow = Literal["drop", "truncate", "raise"]
Groups = Sequence[Mapping[str, str]]  # per document: output key -> sample key

DPO_GROUPS: Groups = (
    {"sequence": "chosen", "loss_mask": "chosen_mask"},
    {"sequence": "rejected", "loss_mask": "rejected_mask"},
)


@dataclass(slots=True)
class _Item:
    sample_id: int
    doc_lengths: tuple[int, ...]
    arrays: dict[str, np.ndarray]  # output key -> the documents back to back
    length: int = field(init=False)

    def __post_init__(self) -> None:
        self.length = sum(self.doc_lengths)


class _Bins:
    """Open packs, found by remaining space with bisection: best fit in O(log n)."""

    def __init__(self, capacity: int) -> None:
        self.capacity = capacity
        self._free: list[tuple[int, int]] = []  # (remaining, bin id), ascending
        self._contents: dict[int, list[_Item]] = {}
        self._next_id = 0

    @property
    def item_count(self) -> int:
        return sum(len(items) for items in self._contents.values())

    def place(self, item: _Item) -> None:
        i = bisect_left(self._free, (item.length, -1))
        if i < len(self._free):
            remaining, bin_id = self._free.pop(i)
        else:
            remaining, bin_id = self.capacity, self._open()
        self._contents[bin_id].append(item)
        insort(self._free, (remaining - item.length, bin_id))

    def take(self, keep_open: int) -> list[list[_Item]]:
        """Remove every bin except the ``keep_open`` emptiest non-full ones, oldest first."""
        emptiest = self._free[max(len(self._free) - keep_open, 0) :] if keep_open else []
        self._free = [entry for entry in emptiest if entry[0] > 0]
        kept = {bin_id for _, bin_id in self._free}
        taken = sorted(bin_id for bin_id in self._contents if bin_id not in kept)
        return [self._contents.pop(bin_id) for bin_id in taken]

    def _open(self) -> int:
        bin_id, self._next_id = self._next_id, self._next_id + 1
        self._contents[bin_id] = []
        return bin_id


class BfdPacker:
    """Incremental BFD packer: ``add(samples)`` returns the packs completed so far, ``flush()``
    the rest. Memory: at most ``window`` samples plus ``keep_open`` packs.

    Over-long samples follow ``overflow``: "raise" (ValueError), "drop" (counted as
    ``too_long``) or "truncate" (cut to pack_size; a multi-group sample such as a DPO pair cannot
    be cut fairly and is dropped as ``pair_too_long``). Samples with an empty document are
    dropped as ``empty``. Counts are in ``stats``.
    """

    def __init__(
        self,
        pack_size: int,
        pad_value: int | Mapping[str, int],
        *,
        window: int = 1000,
        overflow: Overflow = "raise",
        groups: Groups | None = None,
        keep_open: int = 8,
    ) -> None:
        _check_config(pack_size, pad_value, window, overflow, groups, keep_open)
        self.pack_size, self.pad_value, self.window = pack_size, pad_value, window
        self.overflow, self.groups, self.keep_open = overflow, groups, keep_open
        self.stats = PackStats(pack_size)
        self._dtypes: dict[str, np.dtype] | None = None  # output keys, learned from the first sample
        self._pending: list[_Item] = []
        self._bins = _Bins(pack_size)

    @property
    def buffered_samples(self) -> int:
        return len(self._pending) + self._bins.item_count

    def add(self, samples: Iterable[Mapping[str, np.ndarray]]) -> Packs:
        done = []
        for sample in samples:
            item = self._item(sample)
            if item is not None:
                self._pending.append(item)
            if len(self._pending) >= self.window:
                done.append(self._pack_pending(self.keep_open))
        return Packs.concat(done) if done else self._build([])

    def flush(self) -> Packs:
        return self._pack_pending(keep_open=0)

    def _pack_pending(self, keep_open: int) -> Packs:
        for item in sorted(self._pending, key=lambda it: it.length, reverse=True):
            self._bins.place(item)
        self._pending = []
        return self._build(self._bins.take(keep_open))

    def _item(self, sample: Mapping[str, np.ndarray]) -> _Item | None:
        sample_id = self.stats.samples
        self.stats.samples += 1
        docs = [self._document(sample, group, sample_id) for group in self._group_maps(sample)]
        lengths = tuple(next(iter(d.values())).size for d in docs)
        if min(lengths) == 0:
            self.stats.drop("empty")
            return None
        if sum(lengths) > self.pack_size:
            docs = self._overflow(docs, lengths, sample_id)
            if docs is None:
                return None
            lengths = (self.pack_size,)
        arrays = docs[0] if len(docs) == 1 else {k: np.concatenate([d[k] for d in docs]) for k in docs[0]}
        return _Item(sample_id, lengths, arrays)

    def _group_maps(self, sample: Mapping[str, np.ndarray]) -> Groups:
        return self.groups if self.groups is not None else ({k: k for k in sample},)

    def _document(self, sample, group: Mapping[str, str], sample_id: int) -> dict[str, np.ndarray]:
        missing = [k for k in group.values() if k not in sample]
        if missing:
            raise ValueError(f"sample {sample_id} lacks keys {missing}; available keys: {sorted(sample)}")
        # A copy: the caller may reuse its buffers while the sample waits for its pack.
        doc = {out: np.array(sample[key]) for out, key in group.items()}
        self._check_document(doc, sample_id)
        return doc

    def _check_document(self, doc: dict[str, np.ndarray], sample_id: int) -> None:
        shapes = {k: v.shape for k, v in doc.items()}
        if any(len(s) != 1 for s in shapes.values()) or len(set(shapes.values())) > 1:
            raise ValueError(f"sample {sample_id}: keys must be aligned 1-D arrays of one length, got {shapes}")
        if self._dtypes is None:
            self._dtypes = {k: v.dtype for k, v in doc.items()}
        elif set(doc) != set(self._dtypes):
            raise ValueError(f"sample {sample_id} has keys {sorted(doc)}, earlier samples {sorted(self._dtypes)}")

    def _overflow(self, docs, lengths: tuple[int, ...], sample_id: int) -> list[dict[str, np.ndarray]] | None:
        if self.overflow == "raise":
            parts = "+".join(map(str, lengths))
            raise ValueError(
                f"sample {sample_id} has {parts} = {sum(lengths)} tokens > pack_size {self.pack_size}; "
                "set overflow='drop' or 'truncate' (single-document samples only), or increase pack_size"
            )
        if self.overflow == "drop" or len(docs) > 1:
            self.stats.drop("too_long" if self.overflow == "drop" else "pair_too_long")
            return None
        self.stats.truncated += 1
        return [{k: v[: self.pack_size] for k, v in docs[0].items()}]

    def _build(self, bins: list[list[_Item]]) -> Packs:
        packs = _assemble(bins, self._dtypes or {}, self.pack_size, self._pads())
        self.stats.packs += len(packs)
        self.stats.packed_samples += sum(len(b) for b in bins)
        self.stats.tokens += int(sum(it.length for b in bins for it in b))
        return packs

    def _pads(self) -> dict[str, object]:
        return {key: _pad_for(key, dtype, self.pad_value) for key, dtype in (self._dtypes or {}).items()}


def pack_bfd(
    samples: Iterable[Mapping[str, np.ndarray]],
    pack_size: int,
    pad_value: int | Mapping[str, int],
    **options,
) -> tuple[Packs, PackStats]:
    """Pack a whole stream; ``options`` are BfdPacker's (window, overflow, groups, keep_open)."""
    packer = BfdPacker(pack_size, pad_value, **options)
    packs = packer.add(samples)
    return Packs.concat([packs, packer.flush()]), packer.stats


def _assemble(bins: list[list[_Item]], dtypes: dict[str, np.dtype], pack_size: int, pads: dict) -> Packs:
    """Lay the bins' items out as rows, vectorised: one scatter per key."""
    items = [it for b in bins for it in b]
    used = np.array([sum(it.length for it in b) for b in bins], dtype=np.int64)
    doc_lengths = np.array([n for it in items for n in it.doc_lengths], dtype=np.int64)
    docs_per_pack = np.array([sum(len(it.doc_lengths) for it in b) for b in bins], dtype=np.int64)
    slots = gather_index(np.arange(len(bins), dtype=np.int64) * pack_size, used)
    shape = (len(bins), pack_size)
    arrays = {k: _scatter(shape, slots, [it.arrays[k] for it in items], dtype, pads[k]) for k, dtype in dtypes.items()}
    positions = _scatter(shape, slots, [position_ids_from_lengths(doc_lengths)], position_dtype(pack_size), 0)
    cu_seqlens, cu_offsets = _cu_seqlens(doc_lengths, docs_per_pack)
    sample_ids = np.array([it.sample_id for it in items for _ in it.doc_lengths], dtype=np.int64)
    return Packs(arrays, positions, cu_seqlens, cu_offsets, sample_ids)


def _scatter(shape, slots: np.ndarray, parts: list[np.ndarray], dtype, pad) -> np.ndarray:
    out = np.full(shape[0] * shape[1], pad, dtype=dtype)
    if parts:
        out[slots] = np.concatenate(parts)
    return out.reshape(shape)


def _cu_seqlens(doc_lengths: np.ndarray, docs_per_pack: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Per pack ``[0, end of doc 1, end of doc 2, ...]``, flat, plus offsets into it."""
    cu_offsets = offsets_from_lengths(docs_per_pack + 1)
    doc_offsets = offsets_from_lengths(doc_lengths)
    ends = doc_offsets[1:]
    first_doc = offsets_from_lengths(docs_per_pack)[:-1]
    base = np.repeat(doc_offsets[first_doc], docs_per_pack)
    cu_seqlens = np.zeros(int(cu_offsets[-1]), dtype=np.int32)
    is_end = np.ones(cu_seqlens.size, dtype=bool)
    is_end[cu_offsets[:-1]] = False
    cu_seqlens[is_end] = ends - base
    return cu_seqlens, cu_offsets


def _pad_for(key: str, dtype: np.dtype, pad_value: int | Mapping[str, int]):
    if isinstance(pad_value, Mapping):
        if key in pad_value:
            return pad_value[key]
        if dtype == np.bool_:
            return False
        raise ConfigError(f"no pad value for key {key!r}; add it to pad_value (given for {sorted(pad_value)})")
    return False if dtype == np.bool_ else pad_value


def _check_config(pack_size, pad_value, window, overflow, groups, keep_open) -> None:
    if not isinstance(pack_size, (int, np.integer)) or pack_size <= 0:
        raise ConfigError(f"pack_size must be a positive integer, got {pack_size!r}")
    if pad_value is None:
        raise ConfigError("BFD packing pads every pack: give pad_value (the tokenizer's pad id)")
    if window <= 0 or keep_open < 0:
        raise ConfigError(f"window must be > 0 and keep_open >= 0, got window={window}, keep_open={keep_open}")
    if overflow not in get_args(Overflow):
        raise ConfigError(f"overflow={overflow!r} is unknown; choose one of {get_args(Overflow)}")
    if groups is not None and (not groups or len({frozenset(g) for g in groups}) != 1):
        raise ConfigError("groups must be non-empty and every group must map the same output keys")
