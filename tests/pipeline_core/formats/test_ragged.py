"""Ragged batches against plain Python lists: gather_index, concat_ragged, wrap_rows, keep and select."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats.ragged import Ragged, concat_ragged, gather_index, wrap_rows

rows = st.lists(st.lists(st.integers(-1000, 1000), max_size=12), max_size=15)


@settings(max_examples=300, deadline=None)
@given(slices=st.lists(st.tuples(st.integers(0, 500), st.integers(0, 9)), max_size=20))
def test_gather_index_lists_every_slice_in_order(slices):
    """Any starts (overlapping, decreasing, repeated) and any lengths, zeros included."""
    starts = np.array([s for s, _ in slices], dtype=np.int64)
    lengths = np.array([n for _, n in slices], dtype=np.int64)
    got = gather_index(starts, lengths)
    assert got.dtype == np.int64
    assert got.tolist() == [s + j for s, n in slices for j in range(n)]


@settings(max_examples=200, deadline=None)
@given(
    n=st.integers(0, 12),
    parts=st.integers(1, 4),
    data=st.data(),
)
def test_concat_ragged_joins_each_row_of_every_part(n, parts, data):
    lists = [
        data.draw(st.lists(st.lists(st.integers(0, 60_000), max_size=9), min_size=n, max_size=n)) for _ in range(parts)
    ]
    dtypes = [data.draw(st.sampled_from([np.int32, np.int64, np.uint16])) for _ in range(parts)]
    got = concat_ragged([Ragged.from_lists(rows, dtype) for rows, dtype in zip(lists, dtypes)])
    assert got.values.dtype == np.result_type(*dtypes)
    assert got.offsets.dtype == np.int64 and got.offsets[0] == 0
    assert got.to_lists() == [sum((part[i] for part in lists), []) for i in range(n)]


@settings(max_examples=200, deadline=None)
@given(
    rows=st.lists(st.lists(st.integers(0, 60_000), max_size=9), max_size=12),
    prefix=st.lists(st.integers(0, 60_000), max_size=3),
    suffix=st.lists(st.integers(0, 60_000), max_size=3),
    dtype=st.sampled_from([np.int32, np.uint32, np.uint16]),
)
def test_wrap_rows_puts_every_row_between_the_prefix_and_the_suffix(rows, prefix, suffix, dtype):
    got = wrap_rows(Ragged.from_lists(rows, dtype), np.asarray(prefix, np.int32), np.asarray(suffix, np.int32))
    assert got.values.dtype == np.result_type(dtype, np.int32)
    assert got.offsets.dtype == np.int64 and got.offsets[0] == 0 and got.offsets[-1] == got.values.size
    assert got.to_lists() == [prefix + row + suffix for row in rows]


def test_concat_ragged_keeps_float_parts_and_refuses_unequal_row_counts():
    weights = concat_ragged(
        [Ragged.from_lists([[0.0], []], np.float32), Ragged.from_lists([[0.5, 1.0], [2.0]], np.float32)]
    )
    assert weights.values.dtype == np.float32 and weights.to_lists() == [[0.0, 0.5, 1.0], [2.0]]
    with pytest.raises(ValueError, match="same number of sequences"):
        concat_ragged([Ragged.from_lists([[1]]), Ragged.from_lists([[1], [2]])])


@settings(max_examples=200, deadline=None)
@given(seqs=rows, data=st.data())
def test_keep_returns_the_masked_rows_and_itself_when_all_are_kept(seqs, data):
    mask = data.draw(st.lists(st.booleans(), min_size=len(seqs), max_size=len(seqs)))
    ragged = Ragged.from_lists(seqs)
    got = ragged.keep(np.array(mask, dtype=bool))
    assert got.to_lists() == [s for s, m in zip(seqs, mask) if m]
    assert got.values.dtype == np.int32 and got.offsets.dtype == np.int64
    if all(mask):
        assert got is ragged


@settings(max_examples=200, deadline=None)
@given(seqs=rows.filter(bool), data=st.data())
def test_select_takes_rows_in_any_order_with_repeats(seqs, data):
    order = data.draw(st.lists(st.integers(0, len(seqs) - 1), max_size=20))
    got = Ragged.from_lists(seqs).select(np.array(order, dtype=np.int64))
    assert got.to_lists() == [seqs[i] for i in order]


def test_slices_of_a_batch_keep_working_after_keep():
    ragged = Ragged.from_lists([[1, 2], [3], [], [4, 5, 6]]).slice_rows(1, 4)
    assert ragged.keep(np.array([True, False, True])).to_lists() == [[3], [4, 5, 6]]
