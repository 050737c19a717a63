"""Plans are cached per conversation structure: a warm cache renders exactly what a fresh one does."""

from __future__ import annotations

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core import StrategyFactory

KINDS = st.sampled_from(["text", "reasoning", "tool_calls", "tools"])
VALUE = st.sampled_from(["", "a", " b", "\n"])
BLOCKS = st.lists(st.fixed_dictionaries({"type": KINDS, "value": VALUE}), max_size=3)
MESSAGE = st.fixed_dictionaries(
    {"role": st.sampled_from(["system", "user", "assistant", "tool"]), "content": BLOCKS, "loss_weight": st.just(1.0)}
)
CONVERSATIONS = st.lists(st.lists(MESSAGE, min_size=1, max_size=4), min_size=1, max_size=6)


def same_pieces(a, b) -> bool:
    def key(p):
        return (p.text, None if p.ids is None else p.ids.tolist(), p.message, p.target)

    return [key(p) for p in a] == [key(p) for p in b]


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(conversations=CONVERSATIONS, name=st.sampled_from(["chatml", "alpaca"]))
def test_cached_plans_render_like_fresh_ones(trained, conversations, name):
    warm = StrategyFactory.create(name, trained)
    for messages in conversations:
        fresh = StrategyFactory.create(name, trained)
        assert same_pieces(warm.render_messages(messages), fresh.render_messages(messages))
        assert warm.render_text(messages) == fresh.render_text(messages)


def test_structures_that_flatten_alike_get_their_own_plans(trained):
    """One message of two blocks and two messages of one block each must not share a plan."""
    strategy = StrategyFactory.create("chatml", trained)
    text = {"type": "text", "value": "x"}
    one = [{"role": "user", "content": [text, text], "loss_weight": 0.0}]
    two = [{"role": "user", "content": [text], "loss_weight": 0.0}, {"role": "user", "content": [text]}]
    assert strategy.render_text(one) == "<｜im▁start｜>user\nxx<｜im▁end｜>\n"
    assert strategy.render_text(two) == "<｜im▁start｜>user\nx<｜im▁end｜>\n<｜im▁start｜>user\nx<｜im▁end｜>\n"


def test_markup_pieces_are_shared_between_rows(trained):
    strategy = StrategyFactory.create("chatml", trained)

    def conversation(q):
        return [{"role": "user", "content": [{"type": "text", "value": q}]}]

    first, second = strategy.render_messages(conversation("a")), strategy.render_messages(conversation("b"))
    assert [p.text for p in first if p.ids is None] == ["a"] and [p.text for p in second if p.ids is None] == ["b"]
    shared = [(p, q) for p, q in zip(first, second) if p.ids is not None]
    assert shared and all(p is q for p, q in shared)
    assert np.array_equal(shared[0][0].ids, trained.encode_markup("<｜im▁start｜>user\n"))
