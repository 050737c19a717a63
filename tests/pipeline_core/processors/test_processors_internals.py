"""The vectorised helpers of the conversation processors, against per-row Python written here."""

from __future__ import annotations

from unittest.mock import patch

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import ProcessorFactory
from pipeline_core.converters.sample import text_message
from pipeline_core.formats.ragged import Ragged
from pipeline_core.processors.base import is_blank
from pipeline_core.processors.conversation import first_true
from pipeline_core.processors.messages import message_weights

ROWS = st.lists(st.lists(st.booleans(), max_size=12), max_size=10)
SPACES = st.text(st.sampled_from(" \t\n\r\x0b\x0c\x1c\x85\xa0\u2028\u3000x"), max_size=6)


@settings(max_examples=200, deadline=None)
@given(rows=ROWS)
def test_first_true_is_the_first_true_of_each_row(rows):
    mask = Ragged.from_lists(rows, dtype=bool)
    expected = [row.index(True) if True in row else len(row) for row in rows]
    assert first_true(mask).tolist() == expected


def test_first_true_on_no_rows_and_no_trues():
    assert first_true(Ragged.empty(bool)).tolist() == []
    assert first_true(Ragged.from_lists([[False] * 3, []], dtype=bool)).tolist() == [3, 0]


@given(text=SPACES | st.text(max_size=6))
def test_is_blank_is_strip_empty(text):
    assert is_blank(text) == (not text.strip())


KINDS = st.sampled_from(["text", "reasoning", "tool_calls", "tools", "image"])
BLOCK = st.fixed_dictionaries({"type": KINDS, "value": SPACES})
MESSAGE = st.fixed_dictionaries(
    {
        "role": st.sampled_from(["system", "user", "assistant", "tool"]),
        "content": st.lists(BLOCK, max_size=4),
        "loss_weight": st.sampled_from([-1.0, 0.0, 0.5, 1.0, 2.0]),
    }
)


def says_only_tool_calls(message: dict) -> bool:
    kinds = [b["type"] for b in message["content"]]
    spoken = [b["value"] for b in message["content"] if b["type"] == "text" and b["value"].strip()]
    return "tool_calls" in kinds and not spoken and set(kinds) <= {"text", "tool_calls", "reasoning"}


def expected_weights(messages: list[dict], train_on: str, train_tool_calls: bool) -> list[float]:
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"]
    out = []
    for i, m in enumerate(messages):
        trained = m["role"] == "assistant" and (train_tool_calls or not says_only_tool_calls(m))
        if train_on == "last" and (not assistants or i != assistants[-1]):
            trained = False
        out.append(max(m["loss_weight"], 0.0) if trained else 0.0)
    return out


@settings(max_examples=200, deadline=None)
@given(
    messages=st.lists(MESSAGE, max_size=5),
    train_on=st.sampled_from(["all", "last"]),
    train_tool_calls=st.booleans(),
)
def test_message_weights_follow_the_rules(messages, train_on, train_tool_calls):
    assert message_weights(messages, train_on, train_tool_calls) == expected_weights(
        messages, train_on, train_tool_calls
    )


def test_general_dpo_path_encodes_the_shared_prompt_once(trained):
    """chosen and rejected render the same prompt text: the batch's encode call holds it once."""
    processor = ProcessorFactory.create("dpo", trained)
    rows = [
        {f"{side}_messages": [text_message("user", f"question {k}"), text_message("assistant", f"{side} {k}")]}
        for k in range(3)
        for side in ("chosen", "rejected")
    ]
    rows = [rows[k] | rows[k + 1] for k in range(0, 6, 2)]
    sent = []
    encode = trained.encode_ragged
    with patch.object(trained, "encode_ragged", side_effect=lambda texts: sent.append(list(texts)) or encode(texts)):
        batch = processor.process_batch(rows)
    assert len(sent) == 1 and sorted(sent[0]) == sorted(
        [f"question {k}" for k in range(3)] + [f"{side} {k}" for side in ("chosen", "rejected") for k in range(3)]
    )
    for k in range(3):
        prompt = processor.strategy.assemble_prompt(trained.encode(f"question {k}"))
        for side in ("chosen", "rejected"):
            expected = prompt + processor.strategy.assemble_response(trained.encode(f"{side} {k}"))
            assert batch.samples[side][k].tolist() == expected
