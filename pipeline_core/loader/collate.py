"""h5_collate: a ``DataLoader`` batch from ``H5Dataset`` items, as trainers take it.

    loader = DataLoader(H5Dataset(folder, labels=True), batch_size=8, collate_fn=h5_collate)
    batch["input_ids"], batch["attention_mask"], batch["labels"]     # [8, T] int64 each

Unpacked items (one sample each, different lengths) are right-padded to the batch's longest:
``input_ids`` (the stored ``sequence``) with ``pad_id``, ``labels`` with -100 (ignored by
``F.cross_entropy`` and HF/TRL losses), masks with False, anything else with 0; ``attention_mask``
is 1 on real tokens. Packed items (rows of ``pack_size``) are stacked as they are, with no
``attention_mask``: given one, transformers' models attend across the documents of a pack, and
without one they find the documents from ``position_ids`` (0 at every document start), which
stay a [B, pack_size] tensor; ``cu_seqlens`` and ``media`` (one tensor per pack, of its own
length) are lists of B tensors. Other token keys (DPO's ``chosen``/``rejected``) are padded the same way with
``{key}_attention_mask``.

flash-attention finds a pack's documents from ``position_ids`` only at batch size 1. With
``flash_attn_kwargs=True`` a packed batch also carries ``cu_seq_lens_q``/``cu_seq_lens_k`` (int32)
and ``max_length_q``/``max_length_k`` for the whole batch flattened into one row, exactly as
transformers derives them from flattened ``position_ids`` (a boundary wherever a position is 0,
so each pad is a segment of its own), which transformers' flash-attention path takes at any batch
size. Off by default: models that are not transformers' reject unknown keyword arguments.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import torch

IGNORE_INDEX = -100  # the label torch's and HF's losses skip
CU_SEQLENS = "cu_seqlens"
PER_PACK = (CU_SEQLENS, "media")  # packed keys of a length of their own per pack: listed, not stacked
RENAMED = {"sequence": "input_ids"}


@dataclass(frozen=True, slots=True)
class H5Collate:
    """A collate function padding with ``pad_id`` (see the module doc); ``h5_collate`` pads with 0,
    ``H5Dataset.collate`` with the pad id the files were written with."""

    pad_id: int = 0
    flash_attn_kwargs: bool = False  # packed batches: cu_seq_lens_q/k and max_length_q/k (module doc)

    def __call__(self, items: Sequence[dict[str, torch.Tensor]]) -> dict[str, torch.Tensor | list[torch.Tensor]]:
        if not items:
            raise ValueError("h5_collate got an empty batch")
        if CU_SEQLENS in items[0]:
            return self._packed(items)
        return self._unpacked(items)

    def _packed(self, items: Sequence[dict]) -> dict:
        """Stacked rows and the lists of the per-pack keys; no attention_mask (see the module doc)."""
        batch: dict = {}
        for key in items[0]:
            values = [it[key] for it in items]
            batch[RENAMED.get(key, key)] = values if key in PER_PACK else torch.stack(values)
        if self.flash_attn_kwargs:
            batch |= flash_kwargs(batch["position_ids"])
        return batch

    def _unpacked(self, items: Sequence[dict]) -> dict:
        batch: dict = {}
        for key in items[0]:
            values = [it[key] for it in items]
            name = RENAMED.get(key, key)
            if values[0].dim() == 0:
                batch[name] = torch.stack(values)
                continue
            batch[name] = pad(values, self._fill(key, values[0]))
            if is_token_key(key, values[0]):
                mask = "attention_mask" if name == "input_ids" else f"{key}_attention_mask"
                batch[mask] = pad([torch.ones(len(v), dtype=torch.long) for v in values], 0)
        return batch

    def _fill(self, key: str, sample: torch.Tensor) -> int | bool | float:
        if key == "labels" or key.endswith("_labels"):
            return IGNORE_INDEX
        if sample.dtype == torch.bool:
            return False
        return self.pad_id if is_token_key(key, sample) else 0


def flash_kwargs(position_ids: torch.Tensor) -> dict:
    """Varlen flash-attention boundaries of a ``[B, T]`` batch flattened to one row of ``B * T``: a
    segment starts at every 0 position (every document, every pad) and the last ends at ``B * T``."""
    flat = position_ids.reshape(-1)
    starts = torch.nonzero(flat == 0).view(-1)
    cu = torch.cat([starts, torch.tensor([flat.numel()])]).to(torch.int32)
    longest = int(cu.diff().max()) if cu.numel() > 1 else 0
    return {"cu_seq_lens_q": cu, "cu_seq_lens_k": cu, "max_length_q": longest, "max_length_k": longest}


def document_starts(cu_seqlens: torch.Tensor) -> torch.Tensor:
    """The positions where a pack's documents start (``cu_seqlens[:-1]``)."""
    return cu_seqlens[:-1].long()


def is_token_key(key: str, sample: torch.Tensor) -> bool:
    """Whether ``key`` holds token ids: an integer key that is no label, position or boundary."""
    if sample.dtype in (torch.bool, torch.float16, torch.float32, torch.float64, torch.uint8):
        return False
    return key not in ("position_ids", CU_SEQLENS, "labels") and not key.endswith(("_labels", "_lengths"))


def pad(values: Sequence[torch.Tensor], fill) -> torch.Tensor:
    """The 1-D ``values`` right-padded with ``fill`` to the longest, as one [len(values), longest] tensor."""
    longest = max(len(v) for v in values)
    out = torch.full((len(values), longest), fill, dtype=values[0].dtype)
    for row, value in enumerate(values):
        out[row, : len(value)] = value
    return out


h5_collate = H5Collate()
