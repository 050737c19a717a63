"""SequencePacker: streaming concatenation into fixed-length packs.

Sequences are laid end to end; every time the buffer reaches ``pack_size`` a full pack is cut,
so a sequence may continue in the next pack. Only the final tail is padded. Several aligned keys
(``sequence`` and its ``loss_mask``) are packed in lockstep so a mask bit always stays on its
token. Boolean keys pad with False, every other key with ``pad_value``.

Incremental use keeps memory bounded by one batch plus one pack::

    packer = SequencePacker(2048, pad_value=0)
    for batch in batches:                     # {"sequence": Ragged | flat array, ...}
        write(packer.add(batch))              # {"sequence": int32[n_full, 2048], ...}
    write(packer.flush())                     # the padded tail, 0 or 1 rows
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.ragged import Ragged


def _flat(values) -> np.ndarray:
    if isinstance(values, Ragged):
        return values.values
    if isinstance(values, (list, tuple)):
        arrays = [_as_1d(v) for v in values]
        if not arrays:
            return np.zeros(0, dtype=np.int32)
        return np.concatenate([a.astype(np.result_type(*arrays), copy=False) for a in arrays])
    return _as_1d(values)


def _as_1d(value) -> np.ndarray:
    array = np.asarray(value)
    if array.ndim != 1:
        raise ValueError(f"SequencePacker packs 1-D sequences; got an array of shape {array.shape}")
    return array


class SequencePacker:
    """Packs 1-D sequences end to end into ``[n, pack_size]`` rows, aligned keys in lockstep.

    ``add(batch)`` returns the full packs the batch completes; ``flush()`` the padded tail. A
    sequence may continue in the next pack (concatenation packing, as pretraining does); booleans pad
    with False, other keys with ``pad_value``. See the module docstring for an example.
    """

    def __init__(self, pack_size: int, pad_value: int | None = None) -> None:
        self.pack_size = int(pack_size)
        if self.enabled and pad_value is None:
            raise ConfigError("packing pads the last pack: give pad_value or load the tokenizer with pad_token=...")
        self.pad_value = pad_value
        self._tail: dict[str, np.ndarray] = {}
        self.packs = 0
        self.tokens = 0  # real (non-pad) tokens packed
        self.pad_tokens = 0

    @property
    def enabled(self) -> bool:
        return self.pack_size > 0

    @property
    def pending(self) -> int:
        """Tokens waiting for the next pack (fewer than ``pack_size``)."""
        return next(iter(self._tail.values())).size if self._tail else 0

    def add(self, samples: Mapping[str, object]) -> dict[str, np.ndarray]:
        """Feed aligned keys (Ragged, flat arrays or lists of 1-D arrays); get the full packs."""
        flats = {k: _flat(v) for k, v in samples.items()}
        sizes = {k: v.size for k, v in flats.items()}
        if len(set(sizes.values())) > 1:
            raise ValueError(f"aligned keys differ in length: {sizes}; every key needs one value per token")
        if self._tail and set(flats) != set(self._tail):
            raise ValueError(f"keys changed between batches: {sorted(self._tail)} then {sorted(flats)}")
        joined = {k: self._join(k, v) for k, v in flats.items()}
        total = next(iter(joined.values())).size if joined else 0
        n_full = total // self.pack_size
        cut = n_full * self.pack_size
        self._tail = {k: v[cut:].copy() for k, v in joined.items()}
        self.packs += n_full
        self.tokens += cut
        return {k: v[:cut].reshape(n_full, self.pack_size) for k, v in joined.items()}

    def flush(self) -> dict[str, np.ndarray]:
        """The padded final pack (zero rows when the tail is empty); resets the packer."""
        tail, self._tail = self._tail, {}
        used = next(iter(tail.values())).size if tail else 0
        if used == 0:
            return {k: v.reshape(0, self.pack_size) for k, v in tail.items()}
        self.packs += 1
        self.tokens += used
        self.pad_tokens += self.pack_size - used
        return {k: self._pad(v)[None, :] for k, v in tail.items()}

    def pack(self, sequences: Sequence | Mapping[str, Sequence]):
        """One-shot packing of a list of sequences (or a dict of aligned lists) -> torch tensors."""
        import torch

        if not self.enabled:
            return sequences
        as_dict = isinstance(sequences, Mapping)
        data = sequences if as_dict else {"sequence": sequences}
        full = self.add(data)
        tail = self.flush()
        packed = {k: torch.from_numpy(np.concatenate([full[k], tail[k]])) for k in full}
        return packed if as_dict else packed["sequence"]

    @property
    def fill(self) -> float:
        """Share of packed positions holding real tokens."""
        return self.tokens / (self.packs * self.pack_size) if self.packs else 0.0

    def _join(self, key: str, values: np.ndarray) -> np.ndarray:
        tail = self._tail.get(key)
        if tail is None or tail.size == 0:
            return values
        dtype = np.result_type(tail, values)
        return np.concatenate([tail.astype(dtype, copy=False), values.astype(dtype, copy=False)])

    def _pad(self, values: np.ndarray) -> np.ndarray:
        pad = False if values.dtype == np.bool_ else self.pad_value
        out = np.full(self.pack_size, pad, dtype=values.dtype)
        out[: values.size] = values
        return out
