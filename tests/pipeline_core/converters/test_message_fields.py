"""A message's ``name`` and a tool result's ``tool_call_id`` are carried, never dropped: chat templates may write them."""

from __future__ import annotations

import json

import orjson
import pytest

from pipeline_core.converters import ConverterFactory
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.sources import converter_label

CALL = {"id": "call_7", "type": "function", "function": {"name": "add", "arguments": "{}"}}
OPENAI_ROW = {
    "messages": [
        {"role": "system", "content": "S", "name": "moderator"},
        {"role": "user", "content": "1+1?", "name": "alice"},
        {"role": "assistant", "content": None, "tool_calls": [CALL]},
        {"role": "tool", "content": "2", "tool_call_id": "call_7", "name": "add"},
        {"role": "assistant", "content": "2", "name": "helper"},
    ]
}


def convert(name: str, row: dict) -> dict:
    return ConverterFactory.create(name)(row)


def text(value: str) -> dict:
    return {"type": "text", "value": value}


def test_openai_carries_name_and_tool_call_id():
    assert convert("openai", OPENAI_ROW)["messages"] == [
        {"role": "system", "content": [text("S")], "loss_weight": 0.0, "name": "moderator"},
        {"role": "user", "content": [text("1+1?")], "loss_weight": 0.0, "name": "alice"},
        {"role": "assistant", "content": [{"type": "tool_calls", "value": json.dumps(CALL)}], "loss_weight": 1.0,
         "content_absent": True},
        {"role": "tool", "content": [text("2")], "loss_weight": 0.0, "name": "add", "tool_call_id": "call_7"},
        {"role": "assistant", "content": [text("2")], "loss_weight": 1.0, "name": "helper"},
    ]  # fmt: skip


def test_a_null_field_is_no_field_and_an_empty_name_is_kept():
    """transformers drops null keys before rendering; an empty string it passes on."""
    row = {"messages": [{"role": "user", "content": "q", "name": None, "tool_call_id": None}]}
    assert set(convert("openai", row)["messages"][0]) == {"role", "content", "loss_weight"}
    row = {"messages": [{"role": "user", "content": "q", "name": ""}]}
    assert convert("openai", row)["messages"][0]["name"] == ""


def test_exported_rows_read_back_unchanged():
    """export writes the sample as JSONL; the cache stage validates it with the messages converter."""
    sample = convert("openai", OPENAI_ROW)
    line = orjson.loads(orjson.dumps(sample))
    assert convert("messages", line) == sample


def test_pair_turns_carry_the_fields():
    prompt = OPENAI_ROW["messages"][:4]
    pair = convert("pair", {"messages": prompt, "chosen": "2", "rejected": "3"})
    expected = convert("openai", {"messages": prompt})["messages"]
    assert pair["chosen_messages"][:4] == pair["rejected_messages"][:4] == expected


BAD = [
    ("openai", {"role": "user", "content": "q", "tool_call_id": "c1"}, "invalid_tool_call", "tool_call_id"),
    ("openai", {"role": "assistant", "content": "a", "name": 7}, "wrong_type", "name"),
    ("openai", {"role": "tool", "content": "2", "tool_call_id": 7}, "wrong_type", "tool_call_id"),
    ("messages", {"role": "assistant", "content": [text("a")], "tool_call_id": "c1"}, "invalid_tool_call", "tool_call_id"),
    ("messages", {"role": "user", "content": [text("q")], "name": ["a"]}, "wrong_type", "name"),
    ("messages", {"role": "assistant", "content": [], "function_call": {"name": "f"}}, "uncarried_field", "function_call"),
]  # fmt: skip


@pytest.mark.parametrize(("name", "message", "reason", "key"), BAD)
def test_a_field_that_cannot_be_carried_as_given_is_a_row_error(name, message, reason, key):
    with pytest.raises(RowError) as caught:
        convert(name, {"messages": [message]})
    assert (caught.value.reason, caught.value.field) == (reason, f"messages[0].{key}")


@pytest.mark.parametrize("name", ["openai", "messages", "pair"])
def test_the_converters_that_carry_the_fields_say_so_where_outputs_are_keyed(name):
    """sources' fingerprints and processors' describe() hold the converter's repr: outputs written
    while the fields were dropped (openai, pair) or refused (messages), or a null content was
    written as "" (content_absent), or reasoning under thinking/reasoning was dropped, get other keys."""
    converter = ConverterFactory.create(name)
    carried = "carries=('name', 'tool_call_id', 'content_absent', 'reasoning:reasoning_content|thinking|reasoning,empty_kept')"
    assert carried in converter_label(converter)
    with pytest.raises(ConfigError, match="carries"):  # not an option
        ConverterFactory.create(name, carries=())
