"""The contents of a packed HDF5 file against the packers' own rules, for ``h5pipe verify``.

A manifest's sha256 says a file is the one the run wrote; these checks say that what it wrote is a
well-formed pack file, so a writer's mistake is a reported problem rather than a silent one:

- ``cu_seqlens``: every pack has at least one document; its boundaries start at 0, strictly
  increase and end at most at ``pack_size`` (the rest of the row is padding);
- token ids (the ``packed_id_keys`` attribute; ``sequence`` in files written before it) lie in
  ``[0, vocab_size)`` and equal ``pad_value`` on padding; masks are False and every other key 0
  there (both packers pad them so);
- stored ``position_ids`` equal the ones ``cu_seqlens`` gives (``positions.positions_from_cu``).

Rows are read ``BLOCK_PACKS`` packs at a time; the first block with a problem is reported, naming
its first bad pack.
"""

from __future__ import annotations

import numpy as np

from pipeline_core.formats.positions import CU_SEQLENS, POSITION_IDS, positions_from_cu

BLOCK_PACKS = 4096


def packed_problems(f, attrs: dict) -> list[str]:
    """What breaks the packing rules in the open packed file ``f`` (empty when nothing does)."""
    size = int(attrs.get("pack_size") or 0)
    if size <= 0 or CU_SEQLENS not in f:
        return []
    offsets = f[CU_SEQLENS + "_offsets"][...].astype(np.int64)
    cu = f[CU_SEQLENS][...].astype(np.int64)
    problems = boundary_problems(cu, offsets, size)
    if problems:
        return problems  # the rows are read by their boundaries
    for lo in range(0, offsets.size - 1, BLOCK_PACKS):
        block = offsets[lo : lo + BLOCK_PACKS + 1]  # the block's packs, by the boundaries read above
        problems = _row_problems(f, attrs, lo, cu[block[0] : block[-1]], block - block[0])
        if problems:
            return problems
    return []


def boundary_problems(cu: np.ndarray, offsets: np.ndarray, pack_size: int) -> list[str]:
    """``cu_seqlens`` (flat) and its per-pack offsets against the rules in the module docstring."""
    if offsets.size == 0 or offsets[0] != 0 or offsets[-1] != cu.size or np.any(np.diff(offsets) < 2):
        return ["cu_seqlens_offsets: not from 0 to the cu_seqlens length with at least one document per pack"]
    firsts, lasts = offsets[:-1], offsets[1:] - 1
    if np.any(cu[firsts] != 0):
        return [f"pack {_first(cu[firsts] != 0)}: cu_seqlens does not start at 0"]
    rising = np.diff(cu) > 0
    rising[lasts[:-1]] = True  # the step from one pack's end to the next pack's 0
    if not rising.all():
        pack = int(np.searchsorted(offsets, _first(~rising), side="right")) - 1
        return [f"pack {pack}: cu_seqlens does not strictly increase"]
    if np.any(cu[lasts] > pack_size):
        return [f"pack {_first(cu[lasts] > pack_size)}: cu_seqlens ends past pack_size {pack_size}"]
    return []


def _row_problems(f, attrs: dict, lo: int, cu: np.ndarray, offsets: np.ndarray) -> list[str]:
    """Packs ``lo:lo + len(offsets) - 1``, whose boundaries are ``cu`` (flat) at ``offsets``."""
    hi, size = lo + offsets.size - 1, int(attrs["pack_size"])
    pads = np.arange(size)[None, :] >= cu[offsets[1:] - 1][:, None]
    ids = set(attrs.get("packed_id_keys") or ["sequence"])
    problems = []
    for key in sorted(k for k in f if f[k].ndim == 2 and k != POSITION_IDS):
        rows = f[key][lo:hi]
        problems += _id_problems(key, rows, pads, attrs, lo) if key in ids else _pad_problems(key, rows, pads, lo)
    if POSITION_IDS in f:
        stored = f[POSITION_IDS][lo:hi].astype(np.int32)
        wrong = np.any(stored != positions_from_cu(cu, offsets, size), axis=1)
        if wrong.any():
            problems.append(f"pack {lo + _first(wrong)}: position_ids differ from the ones cu_seqlens gives")
    return problems


def _pad_problems(key: str, rows: np.ndarray, pads: np.ndarray, lo: int) -> list[str]:
    bad = np.any((rows != 0) & pads, axis=1)
    what = "True" if rows.dtype == np.bool_ else "not 0"
    return [f"pack {lo + _first(bad)}: {key} is {what} on padding"] if bad.any() else []


def _id_problems(key: str, rows: np.ndarray, pads: np.ndarray, attrs: dict, lo: int) -> list[str]:
    values = rows.astype(np.int64)
    vocab, pad = int(attrs.get("vocab_size") or 0), int(attrs.get("pad_value", -1))
    outside = np.any(((values < 0) | (values >= vocab)) & ~pads, axis=1) if vocab > 0 else np.zeros(len(rows), bool)
    if outside.any():
        return [f"pack {lo + _first(outside)}: {key} holds ids outside [0, vocab_size {vocab})"]
    bad_pad = np.any((values != pad) & pads, axis=1)
    return [f"pack {lo + _first(bad_pad)}: {key} is not pad_value {pad} on padding"] if bad_pad.any() else []


def _first(flags: np.ndarray) -> int:
    return int(np.flatnonzero(flags)[0])
