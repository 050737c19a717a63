"""Mixing several datasets, the plan: the counts are LLaMA-Factory v1's (checked against a plain
model of its index building), and the selection, subset and interleave invariants (hypothesis).
The mixtures this plans, read from files, are in test_mixture_sources.py."""

from __future__ import annotations

import random
from fractions import Fraction

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.sources import Interleave, Selection, apportion, mix_counts
from pipeline_core.sources.mixing import Subset, lf_count

pytestmark = pytest.mark.usefixtures("hf_offline")


# --- the counts: LLaMA-Factory v1's ---------------------------------------------------------------


def llamafactory_v1_rows(rows: int, size: int | None, weight: float | None) -> int:
    """How many rows LLaMA-Factory v1 gives one dataset, by doing what its data engine does to the
    dataset's index (all rows; ``size`` of them drawn with replacement; then len * ``weight`` of
    those), with real lists and draws, and measuring the result."""
    index = list(range(rows))
    if size is not None:
        index = random.choices(index, k=size)
    if weight is not None:
        index = random.choices(index, k=int(len(index) * weight))
    return len(index)


# Weights whose product with a row count is not what exact arithmetic gives (e.g. 100 * 0.29 is
# 28.999999999999996 in floating point), whole-number weights (YAML ints) and ordinary ones.
weight_st = st.none() | st.sampled_from([0.29, 0.57, 0.1, 0.7, 1.1, 2.3]) | st.integers(1, 4) | st.floats(0.01, 5.0)
entry_st = st.tuples(st.integers(1, 400), st.none() | st.integers(1, 600), weight_st)


@given(st.lists(entry_st, min_size=1, max_size=5))
def test_counts_are_llamafactory_v1s(entries):
    rows, sizes, weights = (list(x) for x in zip(*entries))
    expected = [llamafactory_v1_rows(n, s, w) for n, s, w in entries]
    assert mix_counts(rows, sizes=sizes, weights=weights) == expected
    assert [lf_count(n, s, w) for n, s, w in entries] == expected


@pytest.mark.parametrize(
    ("rows", "size", "weight", "count"),
    [
        (100, None, 0.29, 28),  # 100 * 0.29 = 28.999999999999996 in floating point: 28, not 29
        (100, None, 0.57, 56),  # 56.99999999999999
        (10, None, 0.7, 7),  # the stored 0.7 is below 0.7, but the float product rounds to 7.0
        (3, None, 0.1, 0),  # 0.30000000000000004: the dataset gives nothing, as in LLaMA-Factory
        (100, None, 0.5, 50),
        (91, None, 0.5, 45),  # 45.5
        (100, 250, None, 250),  # size beyond the rows: size rows
        (100, 250, 0.5, 125),  # size first, then weight
        (100, 40, 3, 120),
        (1000, None, 1.0, 1000),
        (1000, None, None, 1000),
    ],
)
def test_count_of_one_dataset(rows, size, weight, count):
    assert mix_counts([rows], sizes=[size], weights=[weight]) == [count]


def test_weight_multiplies_each_dataset_on_its_own():
    assert mix_counts([100, 1000], weights=[1.0, 1.0]) == [100, 1000]  # not 100 + 100 (the old share rule)
    assert mix_counts([999, 300, 500], weights=[2, 1, 1]) == [1998, 300, 500]
    assert mix_counts([999, 300, 500], weights=[2, 1, None]) == [1998, 300, 500]  # missing weight: 1
    assert mix_counts([100], weights=[0.5]) == [50]  # a lone dataset's weight applies
    assert mix_counts([5, 7]) == [5, 7]


def test_total_rescales_the_counts_by_largest_remainder():
    # counts 1998, 300, 500 (sum 2798); quotas 3000 * c / 2798 = 2142.24, 321.66, 536.10: the one
    # row left after the floors goes to the largest remainder (.66)
    assert mix_counts([999, 300, 500], weights=[2, 1, 1], total=3000) == [2142, 322, 536]
    assert mix_counts([999, 300, 500], weights=[2, 1, 1], total=40) == [29, 4, 7]  # 28.56, 4.29, 7.15
    assert mix_counts([10, 30], total=8) == [2, 6]
    assert mix_counts([100], weights=[0.5], total=7) == [7]
    assert mix_counts([3, 10], weights=[0.1, None], total=5) == [0, 5]  # a zero count stays zero


@given(st.lists(entry_st, min_size=1, max_size=5), st.integers(1, 10**6))
def test_total_keeps_the_proportions_of_the_llamafactory_counts(entries, total):
    rows, sizes, weights = (list(x) for x in zip(*entries))
    counts = [llamafactory_v1_rows(n, s, w) for n, s, w in entries]
    if not sum(counts):
        with pytest.raises(ValueError, match="every dataset's count is zero"):
            mix_counts(rows, sizes=sizes, weights=weights, total=total)
        return
    rescaled = mix_counts(rows, sizes=sizes, weights=weights, total=total)
    assert sum(rescaled) == total
    for got, count in zip(rescaled, counts):
        assert abs(got - Fraction(total * count, sum(counts))) < 1


@given(st.integers(0, 10**6), st.lists(st.integers(1, 50), min_size=1, max_size=6))
def test_apportion_is_exact_and_within_one_of_the_quota(total, weights):
    counts = apportion(total, [Fraction(w) for w in weights])
    assert sum(counts) == total
    for count, w in zip(counts, weights):
        assert abs(count - Fraction(total * w, sum(weights))) < 1


def test_mix_counts_rejects_all_zero_and_old_positional_weights():
    with pytest.raises(ValueError, match="every dataset's count is zero"):
        mix_counts([0, 0], total=3)
    with pytest.raises(ValueError, match="every dataset's count is zero"):
        mix_counts([3], weights=[0.1], total=3)
    with pytest.raises(TypeError):
        mix_counts([5, 7], [2, 1])  # weights are keyword-only: an old call fails, never means sizes


# --- the plan -------------------------------------------------------------------------------------


@given(st.integers(1, 300), st.integers(0, 1000), st.integers(0, 2**32), st.integers(1, 40))
def test_selection_repeats_only_when_it_must_and_evenly(rows, count, seed, block):
    selection = Selection.draw(rows, count, (seed, 0, 0))
    object.__setattr__(selection.extra, "block", block)  # small blocks: many of them
    positions = selection.positions(0, count)
    assert selection.count == count == len(positions)
    assert selection.upsampled == max(0, count - rows)
    times = np.bincount(positions, minlength=rows)
    assert times.max() - times.min() <= 1  # every row used floor or ceil(count / rows) times
    if count <= rows:
        assert len(set(positions.tolist())) == count
    for start in (0, count // 3, max(0, count - 1)):
        assert np.array_equal(selection.positions(start, count), positions[start:])


@settings(deadline=None)
@given(st.integers(1, 3000), st.integers(0, 100), st.integers(4, 64), st.integers(0, 2**32))
def test_subset_is_stratified_and_any_range_agrees(rows, percent, block, seed):
    subset = Subset.draw(rows, rows * percent // 100, (seed, 1, 2), block=block)
    whole = np.concatenate([*subset, np.empty(0, np.int64)])
    assert len(whole) == subset.count and np.all(np.diff(whole) > 0) and np.all((whole >= 0) & (whole < rows))
    for p in range(0, rows + 1, block):  # evenly spread: at block edges within one row of the share
        assert abs(np.count_nonzero(whole < p) - p * subset.count / rows) < 1
    items = np.arange(0, subset.count, 3)
    assert np.array_equal(subset.at(items), whole[items])
    assert np.array_equal(subset.positions(subset.count // 2, subset.count), whole[subset.count // 2 :])
    assert Subset.draw(rows, subset.count, (seed, 1, 2), block=block) == subset


@settings(max_examples=60)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=4), st.integers(0, 1000), st.integers(1, 17))
def test_interleave_ranges_agree_with_the_whole(counts, seed, block):
    plan = Interleave(counts, seed, block=block)
    whole = np.concatenate([*plan.ids(0, plan.total), np.empty(0, np.int64)])
    assert np.array_equal(np.bincount(whole, minlength=len(counts)), counts)  # exact counts
    for start in range(0, plan.total + 1, max(1, plan.total // 5)):
        stop = min(plan.total, start + block + 3)
        part = np.concatenate([*plan.ids(start, stop), np.empty(0, np.int64)])
        assert np.array_equal(part, whole[start:stop])
        assert np.array_equal(plan.consumed_before(start), np.bincount(whole[:start], minlength=len(counts)))


def test_interleave_blocks_hold_every_share():
    plan = Interleave([5000, 3000, 2000], seed=4, block=100)
    for ids in plan.ids(0, plan.total):
        shares = np.bincount(ids, minlength=3) / len(ids)
        assert np.all(np.abs(shares * len(ids) - np.array([0.5, 0.3, 0.2]) * len(ids)) <= 1.5)


def test_plans_for_a_billion_rows_are_cheap():
    plan = Interleave([5 * 10**8, 3 * 10**8, 2 * 10**8], seed=0)
    assert plan.consumed_before(10**9 - 1).sum() == 10**9 - 1
    assert len(np.concatenate(list(plan.ids(10**9 - 20_000, 10**9)))) == 20_000
    selection = Selection.draw(10**9, 25 * 10**8, (0, 2, 0))  # upsampled 2.5x
    assert selection.upsampled == 15 * 10**8 and len(selection.positions(24 * 10**8, 24 * 10**8 + 5)) == 5


def test_interleave_depends_on_the_seed_only():
    a, b, c = (list(np.concatenate(list(Interleave([500, 300, 200], s).ids(0, 1000)))) for s in (1, 1, 2))
    assert a == b and a != c
