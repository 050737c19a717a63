"""Seeded, deterministic mixing of datasets. Pure numpy: it decides which rows go where and reads
nothing. Memory is O(datasets + one block) whatever the row counts.

Counts follow LLaMA-Factory v1, dataset by dataset: c_i = int(s_i * w_i), where s_i is its ``size``
(else its n_i rows) and w_i its ``weight`` (else 1, and then no product: c_i = s_i). The product
is Python's: an int times a float rounded once, then truncated, so int(100 * 0.29) == 28 as in
LLaMA-Factory, and a count may be 0 (int(3 * 0.1)). So ``weight`` multiplies a dataset's rows
(weight 1.0 on 100 and 1000 rows gives 100 + 1000) and ``size`` may exceed the rows. A ``total``
(an h5pipe extension) rescales these counts to ``total`` rows in proportion, by largest remainder
in exact rational arithmetic (ties to the earlier dataset).

Selection is where h5pipe differs: LLaMA-Factory v1 draws with replacement (``random.choices``)
even at weight 1.0; this never repeats a row it does not have to. A dataset with c_i <= n_i gives
c_i of its rows without replacement (all of them when c_i = n_i); only c_i > n_i repeats rows:
floor(c_i / n_i) full passes plus c_i mod n_i further rows without replacement, and the repeats
are counted (``Selection.upsampled``). Within a dataset rows keep their order (ascending index,
pass after pass), so a streaming dataset is read front to back.

Subsets are stratified (``Subset``): among the first P rows, floor((P * k + r) / n) are taken (r
seeded), and which ones inside each block of ``MIX_BLOCK`` rows is a seeded sample. So a subset
covers the file evenly, and any range of it is computed without drawing the rest.

Interleave. Output positions are cut into blocks of about ``MIX_BLOCK``; dataset i has
floor((b * c_i + r_i) / blocks) items in the first b blocks (r_i seeded), so every block holds each
dataset's share to within one row, and the order inside a block is a seeded permutation. Any range
of positions is computed on its own (chunks export independently); the global counts are exact.

Randomness: numpy PCG64 seeded with ``SeedSequence([seed, stream, ...])``; the same seed (and numpy)
gives the same plan, another seed another order.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from fractions import Fraction
from math import floor

import numpy as np

MIX_BLOCK = 8192
OFFSETS, ORDER, SELECT, POOL = range(4)  # independent random streams


def generator(seed: int, stream: int, *key: int) -> np.random.Generator:
    return np.random.default_rng([seed, stream, *key])


def lf_count(rows: int, size: int | None = None, weight: float | None = None) -> int:
    """LLaMA-Factory v1's row count for one dataset: ``size`` (else ``rows``) times ``weight``,
    truncated. Deliberately the same Python arithmetic (int times float, then ``int``), not exact
    rationals: int(100 * 0.29) is 28 there, so it is 28 here."""
    base = rows if size is None else size
    return base if weight is None else int(base * weight)


def mix_counts(
    rows: Sequence[int],
    *,
    sizes: Sequence[int | None] | None = None,
    weights: Sequence[float | None] | None = None,
    total: int | None = None,
) -> list[int]:
    """Rows of each dataset in the mixed output: its ``lf_count`` (a None size or weight: unset),
    rescaled to ``total`` when one is given (see the module docstring)."""
    sizes = sizes or [None] * len(rows)
    weights = weights or [None] * len(rows)
    if not len(rows) == len(sizes) == len(weights):
        raise ValueError(f"rows, sizes and weights differ in length: {len(rows)}, {len(sizes)}, {len(weights)}")
    counts = [lf_count(n, s, w) for n, s, w in zip(rows, sizes, weights)]
    if total is None:
        return counts
    if sum(counts) <= 0:
        raise ValueError(f"cannot rescale to total={total}: every dataset's count is zero ({counts})")
    return apportion(total, [Fraction(c) for c in counts])


def apportion(total: int, shares: Sequence[Fraction]) -> list[int]:
    """Largest-remainder split of ``total`` in proportion to ``shares``; ties go to the earlier one."""
    quotas = [total * s / sum(shares) for s in shares]
    counts = [floor(q) for q in quotas]
    by_remainder = sorted(range(len(quotas)), key=lambda i: (counts[i] - quotas[i], i))
    for i in by_remainder[: total - sum(counts)]:
        counts[i] += 1
    return counts


def last_at_most(key, target: int, hi: int) -> int:
    """The largest b in [0, hi) with key(b) <= target, for a non-decreasing key with key(0) <= target."""
    lo = 0
    while hi - lo > 1:
        mid = (lo + hi) // 2
        lo, hi = (mid, hi) if key(mid) <= target else (lo, mid)
    return lo


@dataclass(frozen=True, slots=True)
class Subset:
    """``count`` of ``rows`` row positions, ascending, stratified (see the module docstring)."""

    rows: int
    count: int
    key: tuple[int, ...]  # (seed, stream, dataset): where its randomness comes from
    offset: int = 0
    block: int = MIX_BLOCK

    @classmethod
    def draw(cls, rows: int, count: int, key: tuple[int, ...], block: int = MIX_BLOCK) -> Subset:
        if not 0 <= count <= rows:
            raise ValueError(f"a subset takes 0..{rows} rows, not {count}")
        offset = int(generator(*key).integers(rows)) if 0 < count < rows else 0
        return cls(rows, count, key, offset, block)

    @property
    def blocks(self) -> int:
        return -(-self.rows // self.block)

    def taken_before(self, row: int) -> int:
        return (min(row, self.rows) * self.count + self.offset) // self.rows if self.rows else 0

    def block_rows(self, b: int) -> np.ndarray:
        lo, hi = b * self.block, min(self.rows, (b + 1) * self.block)
        k = self.taken_before(hi) - self.taken_before(lo)
        if k == hi - lo:
            return np.arange(lo, hi, dtype=np.int64)
        return lo + np.sort(generator(*self.key, b).choice(hi - lo, k, replace=False)).astype(np.int64)

    def positions(self, start: int, stop: int) -> np.ndarray:
        """Row positions of subset items ``start..stop-1``."""
        return self.at(np.arange(start, min(stop, self.count), dtype=np.int64))

    def at(self, items: np.ndarray) -> np.ndarray:
        """Row positions of the subset items ``items`` (ascending), block by block."""
        out, i = np.empty(len(items), np.int64), 0
        while i < len(items):
            b = last_at_most(lambda x: self.taken_before(x * self.block), int(items[i]), self.blocks)
            first, after = self.taken_before(b * self.block), self.taken_before((b + 1) * self.block)
            j = int(np.searchsorted(items, after, side="left"))
            out[i:j] = self.block_rows(b)[items[i:j] - first]
            i = j
        return out

    def __iter__(self) -> Iterator[np.ndarray]:
        """All positions, one ascending array per block."""
        return (self.block_rows(b) for b in range(self.blocks))


@dataclass(frozen=True, slots=True)
class Selection:
    """Which of a dataset's ``rows`` rows are taken, in order: ``passes`` full passes, then ``extra``."""

    rows: int
    passes: int
    extra: Subset

    @classmethod
    def draw(cls, rows: int, count: int, key: tuple[int, ...]) -> Selection:
        if count and not rows:
            raise ValueError(f"cannot take {count} rows from a dataset with no rows")
        passes, rest = divmod(count, rows) if rows else (0, 0)
        return cls(rows, passes, Subset.draw(rows, rest, key))

    @property
    def count(self) -> int:
        return self.passes * self.rows + self.extra.count

    @property
    def upsampled(self) -> int:
        return max(0, self.count - self.rows)

    def positions(self, start: int, stop: int) -> np.ndarray:
        """Row positions of selection items ``start..stop-1``."""
        full = self.passes * self.rows
        head = np.arange(start, min(stop, full), dtype=np.int64) % max(self.rows, 1)
        return np.concatenate([head, self.extra.positions(max(start, full) - full, stop - full)])


class Interleave:
    """The dataset of every output position, block by block (see the module docstring)."""

    def __init__(self, counts: Sequence[int], seed: int, block: int = MIX_BLOCK) -> None:
        self.counts = [int(c) for c in counts]
        self.seed, self.total = seed, sum(self.counts)
        self.blocks = -(-self.total // block)
        rng = generator(seed, OFFSETS)
        self.offsets = [int(rng.integers(self.blocks)) if self.blocks else 0 for _ in self.counts]

    def before(self, b: int) -> np.ndarray:
        """Per dataset, its items in blocks ``0..b-1``."""
        return np.array([(b * c + r) // self.blocks for c, r in zip(self.counts, self.offsets)], np.int64)

    def start(self, b: int) -> int:
        return int(self.before(b).sum())

    def order(self, b: int) -> np.ndarray:
        ids = np.repeat(np.arange(len(self.counts)), self.before(b + 1) - self.before(b))
        return generator(self.seed, ORDER, b).permutation(ids)

    def consumed_before(self, position: int) -> np.ndarray:
        """Per dataset, how many of its rows the positions before ``position`` use."""
        if position >= self.total:
            return np.array(self.counts, np.int64)
        b = last_at_most(self.start, position, self.blocks)
        return self.before(b) + np.bincount(self.order(b)[: position - self.start(b)], minlength=len(self.counts))

    def ids(self, start: int, stop: int) -> Iterator[np.ndarray]:
        """Dataset ids of positions ``start..stop-1``, one array per block."""
        stop = min(stop, self.total)
        if start >= stop:
            return
        b = last_at_most(self.start, start, self.blocks)
        while b < self.blocks and (lo := self.start(b)) < stop:
            yield self.order(b)[max(start - lo, 0) : stop - lo]
            b += 1
