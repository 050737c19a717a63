"""Crash-safe output of a .bin/.idx pair: write under temporary names, publish the .idx last.

Readers (Megatron's ``IndexedDataset.exists`` included) treat a prefix as complete when both files
exist. The writer therefore never creates a final ``.idx`` until the ``.bin`` is in place: a crash
at any point leaves at most ``*.tmp`` files and a ``.bin`` without an ``.idx``.
"""

from __future__ import annotations

import contextlib
import os
from dataclasses import dataclass

from pipeline_core.formats.megatron.format import bin_path, idx_path


@dataclass(frozen=True, slots=True)
class PairPaths:
    prefix: str

    @property
    def bin(self) -> str:
        return bin_path(self.prefix)

    @property
    def idx(self) -> str:
        return idx_path(self.prefix)

    @property
    def bin_tmp(self) -> str:
        return self.bin + ".tmp"

    @property
    def idx_tmp(self) -> str:
        return self.idx + ".tmp"

    def publish(self) -> None:
        """Rename the temporary files into place. An older .idx is removed first, so the old
        index is never paired with the new .bin."""
        _remove(self.idx)
        os.replace(self.bin_tmp, self.bin)
        os.replace(self.idx_tmp, self.idx)

    def discard(self) -> None:
        _remove(self.bin_tmp)
        _remove(self.idx_tmp)


def sync(fh) -> None:
    """Flush to disk before a rename publishes the file."""
    fh.flush()
    os.fsync(fh.fileno())


def _remove(path: str) -> None:
    with contextlib.suppress(FileNotFoundError):
        os.remove(path)
