"""The v1 messages converter keeps what a chat template renders: tools, tool calls, reasoning."""

import json

import pytest

from pipeline_core.converters import ConverterFactory
from pipeline_core.errors import RowError

CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


def convert(row):
    return ConverterFactory.create("messages")(row)


def text(value):
    return {"type": "text", "value": value}


def test_row_tools_become_a_tools_block_in_the_system_message():
    row = {"tools": json.dumps(TOOLS), "messages": [{"role": "user", "content": [text("hi")]}]}
    first = convert(row)["messages"][0]
    assert first["role"] == "system" and first["content"] == [{"type": "tools", "value": json.dumps(TOOLS)}]
    with_system = {**row, "tools": TOOLS, "messages": [{"role": "system", "content": [text("Be brief.")]}]}
    [system] = convert(with_system)["messages"]
    assert [b["type"] for b in system["content"]] == ["text", "tools"]
    assert json.loads(system["content"][1]["value"]) == TOOLS


def test_row_tools_go_to_both_sides_of_a_pair():
    side = [{"role": "user", "content": [text("q")]}, {"role": "assistant", "content": [text("a")]}]
    pair = convert({"tools": TOOLS, "chosen_messages": side, "rejected_messages": side})
    assert all(pair[k][0]["content"][0]["type"] == "tools" for k in ("chosen_messages", "rejected_messages"))


def test_tool_call_blocks_of_llamafactory_v1_and_openai_tool_calls():
    v1 = {"role": "assistant", "content": [{"type": "tool_call", "value": json.dumps(CALL)}]}
    openai = {"role": "assistant", "content": [text("Let me check.")], "tool_calls": [CALL, CALL]}
    reasoning = {"role": "assistant", "content": [text("4")], "reasoning_content": "two and two"}
    out = convert({"messages": [v1, openai, reasoning]})["messages"]
    assert out[0]["content"] == [{"type": "tool_calls", "value": json.dumps(CALL)}]
    assert [b["type"] for b in out[1]["content"]] == ["text", "tool_calls", "tool_calls"]
    assert json.loads(out[1]["content"][1]["value"]) == CALL
    assert out[2]["content"] == [{"type": "reasoning", "value": "two and two"}, text("4")]


UNCARRIED = [
    ({"role": "assistant", "content": [], "function_call": CALL}, "uncarried_field"),
    ({"role": "user", "content": [text("21")], "tool_call_id": "c1"}, "invalid_tool_call"),
    ({"role": "user", "content": [text("q")], "tool_calls": [CALL]}, "invalid_tool_call"),
    ({"role": "assistant", "content": [{"type": "tool_call", "value": "not json"}]}, "invalid_json"),
]


@pytest.mark.parametrize("message, reason", UNCARRIED)
def test_content_that_cannot_be_carried_is_a_counted_row_error(message, reason):
    with pytest.raises(RowError) as e:
        convert({"messages": [message]})
    assert e.value.reason == reason


def test_a_batch_skips_and_counts_the_rows_it_cannot_carry(trained):
    from pipeline_core import ProcessorFactory

    user = {"role": "user", "content": [text("Weather?")]}
    good = {"messages": [user, {"role": "assistant", "content": [text("Sunny.")]}]}
    rows = [good, *({"messages": [user, m]} for m, _ in UNCARRIED)]
    batch = ProcessorFactory.create("sft", trained, converter="messages").process_batch(rows)
    assert batch.n_samples == 1 and batch.rows.tolist() == [0]
    assert [(i, e.reason) for i, e in batch.errors] == [(i + 1, r) for i, (_, r) in enumerate(UNCARRIED)]
