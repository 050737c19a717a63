"""A null or missing content is marked ``content_absent``, not written as "": transformers gives the
template no content for it, which a template can tell from "" (tests/pipeline_core/chat/test_null_content.py)."""

from __future__ import annotations

import json

import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.converters import ConverterFactory
from pipeline_core.errors import RowError

CALL = {"id": "call_7", "type": "function", "function": {"name": "add", "arguments": "{}"}}
CALL_BLOCK = {"type": "tool_calls", "value": json.dumps(CALL)}
MISSING = object()  # no content key at all


def convert(name: str, row: dict) -> dict:
    return ConverterFactory.create(name)(row)


def call_turn(content) -> dict:
    turn = {"role": "assistant", "tool_calls": [CALL]}
    return turn if content is MISSING else {**turn, "content": content}


@pytest.mark.parametrize(
    ("content", "expected"),
    [
        (None, {"content": [CALL_BLOCK], "content_absent": True}),
        (MISSING, {"content": [CALL_BLOCK], "content_absent": True}),
        ("", {"content": [{"type": "text", "value": ""}, CALL_BLOCK]}),
        ("Let me add.", {"content": [{"type": "text", "value": "Let me add."}, CALL_BLOCK]}),
    ],
    ids=["null", "missing", "empty", "text"],
)
def test_openai_marks_a_null_or_missing_content_and_keeps_an_empty_one(content, expected):
    out = convert("openai", {"messages": [call_turn(content)]})["messages"][0]
    assert out == {"role": "assistant", "loss_weight": 1.0, **expected}


def test_a_turn_with_reasoning_and_no_content_is_marked():
    turn = {"role": "assistant", "content": None, "reasoning_content": "think"}
    out = convert("openai", {"messages": [turn]})["messages"][0]
    assert (out["content"], out.get("content_absent")) == ([{"type": "reasoning", "value": "think"}], True)


def test_a_turn_with_nothing_at_all_is_still_refused():
    with pytest.raises(RowError) as caught:
        convert("openai", {"messages": [{"role": "assistant", "content": None}]})
    assert (caught.value.reason, caught.value.field) == ("missing_field", "messages[0].content")


@pytest.mark.parametrize("name", ["openai", "pair"])
def test_the_mark_survives_the_exported_jsonl(name):
    """export writes the sample as JSONL; the cache stage reads it back with the messages converter."""
    prompt = [{"role": "user", "content": "1+1?"}, call_turn(None), {"role": "tool", "content": "2"}]
    row = {"messages": prompt} if name == "openai" else {"messages": prompt, "chosen": "2", "rejected": "3"}
    sample = convert(name, row)
    assert convert("messages", orjson.loads(orjson.dumps(sample))) == sample
    assert all(m[1].get("content_absent") is True for m in sample.values())


V1 = {"role": "assistant", "content": [CALL_BLOCK]}


@pytest.mark.parametrize("value", [False, None])
def test_a_false_or_null_mark_is_no_mark(value):
    out = convert("messages", {"messages": [{**V1, "content_absent": value}]})["messages"][0]
    assert "content_absent" not in out


@pytest.mark.parametrize(
    ("message", "reason"),
    [
        ({**V1, "content_absent": "yes"}, "wrong_type"),
        ({**V1, "content_absent": 1}, "wrong_type"),
        ({**V1, "content": [{"type": "text", "value": ""}, CALL_BLOCK], "content_absent": True}, "invalid_value"),
    ],
    ids=["string", "number", "with_text"],
)
def test_a_mark_that_is_not_true_or_contradicts_a_text_is_a_row_error(message, reason):
    with pytest.raises(RowError) as caught:
        convert("messages", {"messages": [message]})
    assert (caught.value.reason, caught.value.field) == (reason, "messages[0].content_absent")
    assert "content_absent" in caught.value.message


contents = st.one_of(st.just(MISSING), st.none(), st.text(max_size=6))


@settings(max_examples=40, deadline=None)
@given(st.lists(contents, min_size=1, max_size=4))
def test_marked_exactly_when_the_row_gave_no_content_and_read_back_unchanged(given_contents):
    turns = [call_turn(c) for c in given_contents]
    sample = convert("openai", {"messages": turns})
    marks = [m.get("content_absent", False) for m in sample["messages"]]
    assert marks == [c is MISSING or c is None for c in given_contents]
    texts = [[b["value"] for b in m["content"] if b["type"] == "text"] for m in sample["messages"]]
    assert texts == [[] if c is MISSING or c is None else [c] for c in given_contents]
    assert convert("messages", json.loads(json.dumps(sample))) == sample
