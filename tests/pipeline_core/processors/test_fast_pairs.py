"""The vectorised flat-row path gives exactly what the general conversation path gives."""

from __future__ import annotations

from unittest.mock import patch

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import ProcessorFactory, TextNormalizer
from pipeline_core.processors import fast_pairs
from tests.pipeline_core.processors.test_processors import alpaca_rows, dpo_rows

TEXT = st.text(st.characters(blacklist_categories=("Cs",)), min_size=0, max_size=40)


def both_paths(processor, rows):
    fast = processor.process_batch(rows)
    general = processor._general_batch(rows)
    return fast, general


def assert_same(fast, general):
    assert fast.rows.tolist() == general.rows.tolist()
    assert [(i, e.reason, e.field, str(e)) for i, e in fast.errors] == [
        (i, e.reason, e.field, str(e)) for i, e in general.errors
    ]
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
    conversation = [{"role": "user", "content": [{"type": "text", "value": "q"}]}]
    conversation.append({"role": "assistant", "content": [{"type": "text", "value": "a"}]})
    mixed = [{"query": "q", "response": "r"}, {"messages": conversation}]
    assert fast_pairs.sft_batch(processor, mixed) is None
    assert (
        fast_pairs.sft_batch(
            ProcessorFactory.create("sft", trained, converter="alpaca"), [{"query": "q", "response": "r"}]
        )
        is None
    )


BAD_SFT = [
    {"query": "q"},
    {"query": "  \n", "response": "r"},
    {"query": "q", "response": ""},
    {"query": 3, "response": "r"},
    {"query": "q", "response": None},
    {"response": "r"},
    ["q", "r"],
    {"messages": [{"role": "user", "content": [{"type": "text", "value": "q"}]}]},  # nothing to train
]


def test_bad_rows_stay_on_the_fast_path_with_the_general_errors(trained, llamafactory):
    processor = ProcessorFactory.create("sft", trained)
    good = alpaca_rows(llamafactory)[:40]
    rows = [row for pair in zip(good, BAD_SFT * 5) for row in pair]
    fast = fast_pairs.sft_batch(processor, rows)
    assert fast is not None
    assert_same(fast, processor._general_batch(rows))
    assert fast.rows.tolist() == list(range(0, 80, 2)) and [i for i, _ in fast.errors] == list(range(1, 80, 2))
    s = processor.strategy
    for k, row in enumerate(good):  # each kept sample, encoded one row at a time
        prompt = s.assemble_prompt(trained.encode(row["query"]))
        expected = prompt + s.assemble_response(trained.encode(row["response"]))
        assert fast.samples["sequence"][k].tolist() == expected
        assert fast.samples["loss_mask"][k].tolist() == [False] * len(prompt) + [True] * (len(expected) - len(prompt))


def test_a_batch_of_bad_rows_only(trained):
    processor = ProcessorFactory.create("dpo", trained, media="keep")
    rows = [{"query": "q", "chosen": "", "rejected": "r"}, {"query": "q", "chosen": "c"}, "text"]
    fast = fast_pairs.dpo_batch(processor, rows)
    assert fast is not None and fast.n_samples == 0
    assert [e.reason for _, e in fast.errors] == ["empty_text", "missing_field", "not_an_object"]
    assert_same(fast, processor._general_batch(rows))


def test_dpo_pair_shares_one_prompt_encoding(trained, llamafactory):
    """Both sides start with the same prompt ids; the query is in the encode call once."""
    processor = ProcessorFactory.create("dpo", trained)
    rows = dpo_rows(llamafactory)[:20]
    sent = []
    encode = trained.encode_ragged
    with patch.object(trained, "encode_ragged", side_effect=lambda texts: sent.append(list(texts)) or encode(texts)):
        batch = processor.process_batch(rows)
    assert len(sent) == 1 and sent[0] == [r[k] for k in ("query", "chosen", "rejected") for r in rows]
    s = processor.strategy
    for k, row in enumerate(rows):
        prompt = s.assemble_prompt(trained.encode(row["query"]))
        assert batch.samples["chosen"][k][: len(prompt)].tolist() == prompt
        assert batch.samples["rejected"][k][: len(prompt)].tolist() == prompt


MAYBE_TEXT = st.none() | st.just(" ") | st.integers(0, 3) | TEXT


@settings(max_examples=60, deadline=None)
@given(
    rows=st.lists(
        st.dictionaries(st.sampled_from(["query", "chosen", "rejected", "response"]), MAYBE_TEXT), max_size=8
    ),
    max_length=st.none() | st.integers(4, 40),
)
def test_random_bad_rows_match(trained, rows, max_length):
    sft = ProcessorFactory.create("sft", trained, max_length=max_length, overflow="truncate", media="keep")
    dpo = ProcessorFactory.create("dpo", trained, max_length=max_length)
    for processor in (sft, dpo):
        fast = processor.process_batch(rows)
        assert_same(fast, processor._general_batch(rows))
