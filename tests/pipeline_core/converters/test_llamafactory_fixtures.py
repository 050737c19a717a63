"""The converters on every row of LLaMA-Factory's alpaca, glaive (sharegpt with tools) and dpo demo
files, against the conversions LLaMA-Factory's data format documents, written out here by hand:

- alpaca: the user turn is ``instruction``, then ``"\\n"`` and ``input`` when there is one; the
  assistant turn is ``output``;
- sharegpt: ``system`` is the system message, ``human`` the user, ``gpt`` the assistant,
  ``function_call`` an assistant turn that calls a tool (its value the call's JSON), ``observation``
  the tool's answer; the ``tools`` column is the tool list, which LLaMA-Factory v1 puts first, in a
  system message's ``tools`` block; an empty list (``"[]"``, 109 of these 300 rows) is no tools
  section, as in LLaMA-Factory and transformers;
- sharegpt preference rows (dpo_en_demo): the conversation, then ``chosen`` or ``rejected`` as the
  last message, one conversation each.

Assistant turns weigh 1, the others 0. The real-template tests (chat/test_real_templates.py and
test_real_template_masks.py) take these v1 messages on to transformers' ``apply_chat_template``;
with this test the whole chain from the raw row is checked against references that are not the
converters themselves.
"""

from __future__ import annotations

import json

import pytest

from tests.pipeline_core.processors.test_messages_helpers import fixture_rows

SHAREGPT_ROLES = {
    "human": "user",
    "gpt": "assistant",
    "function_call": "assistant",
    "observation": "tool",
    "system": "system",
}


def message(role: str, kind: str, value: str) -> dict:
    return {"role": role, "content": [{"type": kind, "value": value}], "loss_weight": float(role == "assistant")}


def alpaca_expected(row: dict) -> list[dict]:
    query = row["instruction"] + ("\n" + row["input"] if row["input"] else "")
    return [message("user", "text", query), message("assistant", "text", row["output"])]


def glaive_expected(row: dict) -> list[dict]:
    head = [message("system", "tools", row["tools"])] if json.loads(row["tools"] or "[]") else []
    turns = [
        message(SHAREGPT_ROLES[t["from"]], "tool_calls" if t["from"] == "function_call" else "text", t["value"])
        for t in row["conversations"]
    ]
    return head + turns


def dpo_expected(row: dict) -> dict:
    """A sharegpt preference row: the shared conversation, then the chosen or the rejected answer."""
    shared = [message(SHAREGPT_ROLES[t["from"]], "text", t["value"]) for t in row["conversations"]]
    return {
        f"{side}_messages": [*shared, message(SHAREGPT_ROLES[row[side]["from"]], "text", row[side]["value"])]
        for side in ("chosen", "rejected")
    }


@pytest.mark.parametrize(
    ("file_name", "expected"),
    [("alpaca_en_demo.json", alpaca_expected), ("glaive_toolcall_en_demo.json", glaive_expected)],
)
def test_every_fixture_row_converts_as_llamafactory_documents(llamafactory, file_name, expected):
    rows, convert = fixture_rows(llamafactory, file_name)
    assert len(rows) >= 80
    for i, row in enumerate(rows):
        assert convert(row)["messages"] == expected(row), f"{file_name} row {i}"


def test_every_dpo_fixture_row_converts_as_llamafactory_documents(llamafactory):
    rows, convert = fixture_rows(llamafactory, "dpo_en_demo.json")
    assert len(rows) >= 80 and any(len(r["conversations"]) > 1 for r in rows)
    for i, row in enumerate(rows):
        assert convert(row) == dpo_expected(row), f"dpo_en_demo.json row {i}"


def test_the_glaive_tool_lists_and_calls_are_json(llamafactory):
    """What the templates receive as tools and calls parses (a converter passing text through keeps it)."""
    rows, _ = fixture_rows(llamafactory, "glaive_toolcall_en_demo.json")
    assert any(json.loads(row["tools"]) for row in rows)
    for row in rows:
        if row["tools"]:
            assert isinstance(json.loads(row["tools"]), list)
        for turn in row["conversations"]:
            if turn["from"] == "function_call":
                assert set(json.loads(turn["value"])) >= {"name", "arguments"}
