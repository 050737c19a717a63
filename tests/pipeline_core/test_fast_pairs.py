"""The vectorised flat-row path gives exactly what the general conversation path gives."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import ProcessorFactory, TextNormalizer
from pipeline_core.processors import fast_pairs
from tests.pipeline_core.test_processors import alpaca_rows, dpo_rows

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=40)


def both_paths(processor, rows):
    fast = processor.process_batch(rows)
    general = processor._general_batch(rows)
    return fast, general


def assert_same(fast, general):
    assert fast.rows.tolist() == general.rows.tolist()
    assert [(i, e.reason) for i, e in fast.errors] == [(i, e.reason) for i, e in general.errors]
    assert fast.truncated == general.truncated
    assert set(fast.samples) == set(general.samples)
    for key in fast.samples:
        assert np.array_equal(fast.samples[key].values, general.samples[key].values), key
        assert np.array_equal(fast.samples[key].offsets, general.samples[key].offsets), key


@pytest.mark.parametrize("strategy", ["chatml", "alpaca"])
@pytest.mark.parametrize(
    "options", [{}, {"max_length": 96, "overflow": "truncate"}, {"max_length": 96}, {"media": "keep"}]
)
def test_sft_on_alpaca_rows(trained, llamafactory, strategy, options):
    processor = ProcessorFactory.create("sft", trained, strategy=strategy, normalizer=TextNormalizer(), **options)
    rows = alpaca_rows(llamafactory)[:300]
    assert fast_pairs.sft_batch(processor, rows) is not None  # the fast path really ran
    assert_same(*both_paths(processor, rows))


@pytest.mark.parametrize("strategy", ["chatml", "alpaca"])
@pytest.mark.parametrize("options", [{}, {"max_length": 200, "overflow": "truncate"}, {"max_length": 200}])
def test_dpo_on_dpo_rows(trained, llamafactory, strategy, options):
    processor = ProcessorFactory.create("dpo", trained, strategy=strategy, **options)
    rows = dpo_rows(llamafactory)[:100]
    assert fast_pairs.dpo_batch(processor, rows) is not None
    assert_same(*both_paths(processor, rows))


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(TEXT, TEXT, TEXT), min_size=1, max_size=8), max_length=st.none() | st.integers(4, 40))
def test_random_rows_match(trained, pairs, max_length):
    sft = ProcessorFactory.create("sft", trained, max_length=max_length, overflow="truncate")
    dpo = ProcessorFactory.create("dpo", trained, strategy="alpaca", max_length=max_length)
    assert_same(*both_paths(sft, [{"query": q, "response": r} for q, r, _ in pairs]))
    assert_same(*both_paths(dpo, [{"query": q, "chosen": c, "rejected": r} for q, c, r in pairs]))


def test_other_rows_take_the_general_path(trained):
    processor = ProcessorFactory.create("sft", trained)
    mixed = [
        {"query": "q", "response": "r"},
        {"messages": [{"role": "user", "content": [{"type": "text", "value": "q"}]}]},
    ]
    assert fast_pairs.sft_batch(processor, mixed) is None
    assert fast_pairs.sft_batch(processor, [{"query": "q"}]) is None
    assert (
        fast_pairs.sft_batch(
            ProcessorFactory.create("sft", trained, converter="alpaca"), [{"query": "q", "response": "r"}]
        )
        is None
    )
