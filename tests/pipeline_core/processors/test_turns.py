"""Turn numbers of per_turn samples, counted by hand."""

import numpy as np

from pipeline_core.errors import RowError
from pipeline_core.processors.turns import name_turns, named, turn_numbers


def test_turn_numbers_count_each_rows_samples_from_one():
    turns = turn_numbers(np.array([2, 1, 3]))
    assert turns.tolist() == [[1, 2], [2, 2], [1, 1], [1, 3], [2, 3], [3, 3]]


def test_rows_of_one_sample_each_have_no_turn_numbers():
    assert turn_numbers(np.array([1, 1, 1])) is None
    assert turn_numbers(np.array([], dtype=np.int64)) is None


def test_only_a_sample_of_a_several_sample_row_is_named():
    turns = turn_numbers(np.array([1, 2]))
    error = RowError("too_long", "the sample has 300 tokens", "messages")
    alone, second = (e for _, e in name_turns([(0, error), (2, error)], turns))
    assert alone is error and alone.turn is None
    assert second.turn == (2, 2) and second.field == "messages" and second.reason == "too_long"
    assert second.message == "trained turn 2 of 2 (one sample per turn): the sample has 300 tokens"
    assert named(error, None, 0) is error
