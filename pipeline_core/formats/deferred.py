"""Deferred keys: written only when they say more than the mask does.

A float key such as ``loss_weight`` is redundant when every value is 0 or 1 (the loss mask holds
the same bits). Whether a value is fractional is only known once the whole file has been seen, so
the values are buffered in a side HDF5 file next to the output while it is written and copied in
at the end, block by block, only for keys with a fractional value. Memory stays bounded by one
batch and one copy block.
"""

from __future__ import annotations

import os

import h5py
import numpy as np

from pipeline_core.formats.h5 import OFFSETS_SUFFIX
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged

COPY_ELEMENTS = 1 << 22  # values per copy block (16 MiB of float32)


def is_fractional(values: np.ndarray) -> bool:
    """True if any value is neither 0 nor 1 (NaN counts as fractional)."""
    values = np.asarray(values)
    return values.dtype != np.bool_ and bool(np.any((values != 0) & (values != 1)))


class DeferredBuffer:
    """Collects deferred keys in ``side_path``; ``copy_into(writer)`` keeps the fractional ones."""

    def __init__(self, side_path: str) -> None:
        self.side_path = side_path
        self._side: H5Writer | None = None
        self.fractional: set[str] = set()
        self.seen: set[str] = set()

    def append_ragged(self, key: str, ragged: Ragged) -> None:
        self._note(key, ragged.values)
        self._writer().append_ragged(key, ragged)

    def append_fixed(self, key: str, rows: np.ndarray) -> None:
        self._note(key, rows)
        self._writer().append_fixed(key, rows)

    def copy_into(self, writer: H5Writer) -> list[str]:
        """Copy the fractional keys into ``writer``; returns them, sorted. Removes the side file."""
        kept = sorted(self.fractional)
        if self._side is not None:
            self._side.close(complete=False)
            with h5py.File(self.side_path, "r") as side:
                for key in kept:
                    _copy_key(side, key, writer)
        self.discard()
        return kept

    @property
    def dropped(self) -> list[str]:
        return sorted(self.seen - self.fractional)

    def discard(self) -> None:
        if self._side is not None and self._side.file.id.valid:
            self._side.close(complete=False)
        if os.path.exists(self.side_path):
            os.unlink(self.side_path)

    def _note(self, key: str, values: np.ndarray) -> None:
        self.seen.add(key)
        if key not in self.fractional and is_fractional(values):
            self.fractional.add(key)

    def _writer(self) -> H5Writer:
        if self._side is None:
            self._side = H5Writer(self.side_path)
        return self._side


def _copy_key(side: h5py.File, key: str, writer: H5Writer) -> None:
    data = side[key]
    if key + OFFSETS_SUFFIX not in side:
        rows = max(1, COPY_ELEMENTS // max(data.shape[1], 1))
        for start in range(0, data.shape[0], rows):
            writer.append_fixed(key, data[start : start + rows])
        return
    offsets = side[key + OFFSETS_SUFFIX][...]
    rows = 1 << 16
    for start in range(0, offsets.size - 1, rows):
        block = offsets[start : start + rows + 1]
        writer.append_ragged(key, Ragged(data[block[0] : block[-1]], block - block[0]))
