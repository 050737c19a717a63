"""Converters on small literal rows: each supported shape, and bad rows with reason and field."""

from __future__ import annotations

import json

import pytest

from pipeline_core.converters import ConverterFactory
from pipeline_core.errors import RowError


def convert(name: str, row, **options) -> dict:
    return ConverterFactory.create(name, **options)(row)


def flat(messages: list[dict]) -> list[tuple[str, str, str]]:
    return [(m["role"], b["type"], b["value"]) for m in messages for b in m["content"]]


CALL = json.dumps({"name": "add", "arguments": {"a": 1}})
TOOLS = json.dumps([{"name": "add", "parameters": {}}])


# --- alpaca ---------------------------------------------------------------------------------------


def test_alpaca_with_system_history_and_input():
    row = {
        "system": "Be brief.",
        "instruction": "Add",
        "input": "1 2",
        "output": "3",
        "history": [["hi", "hello"]],
    }
    assert flat(convert("alpaca", row)["messages"]) == [
        ("system", "text", "Be brief."),
        ("user", "text", "hi"),
        ("assistant", "text", "hello"),
        ("user", "text", "Add\n1 2"),
        ("assistant", "text", "3"),
    ]


def test_alpaca_columns_are_remappable():
    row = {"q": "Why?", "a": "Because.", "sys": "S", "tl": TOOLS}
    columns = {"prompt": "q", "response": "a", "system": "sys", "tools": "tl"}
    sample = convert("alpaca", row, columns=columns)
    assert flat(sample["messages"]) == [
        ("system", "text", "S"),
        ("system", "tools", TOOLS),
        ("user", "text", "Why?"),
        ("assistant", "text", "Because."),
    ]
    assert len(sample["messages"]) == 3  # tools join the system message


# --- sharegpt -------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", ["sharegpt", "pair"])
def test_a_leading_system_turn_is_the_system_prompt_and_the_column_is_not_read(name):
    """LLaMA-Factory's SharegptDatasetConverter: a leading system turn becomes the system prompt and
    the system column is read only when there is none (both were kept: two system messages)."""
    turns = [{"from": "system", "value": "turn"}, {"from": "human", "value": "q"}]
    if name == "sharegpt":
        row, key = {"system": "col", "conversations": [*turns, {"from": "gpt", "value": "a"}]}, "messages"
    else:
        row = {"system": "col", "conversations": turns, "chosen": {"from": "gpt", "value": "a"}, "rejected": "b"}
        key = "chosen_messages"
    assert flat(convert(name, row)[key])[:2] == [("system", "text", "turn"), ("user", "text", "q")]
    without = (
        {**row, "conversations": turns[1:]} if name == "pair" else {**row, "conversations": row["conversations"][1:]}
    )
    assert flat(convert(name, without)[key])[:2] == [("system", "text", "col"), ("user", "text", "q")]


def test_sharegpt_function_call_list_becomes_one_block_per_call():
    calls = [{"name": "a", "arguments": {}}, {"name": "b", "arguments": {}}]
    row = {"conversations": [{"from": "function_call", "value": json.dumps(calls)}]}
    (msg,) = convert("sharegpt", row)["messages"]
    assert [json.loads(b["value"]) for b in msg["content"]] == calls
    assert msg["loss_weight"] == 1.0


def test_sharegpt_videos_and_audios_attach_in_text_order():
    row = {
        "conversations": [{"from": "human", "value": "<audio>a<video>b<audio>"}],
        "videos": ["v.mp4"],
        "audios": ["1.wav", "2.wav"],
    }
    assert flat(convert("sharegpt", row)["messages"]) == [
        ("user", "audio_url", "1.wav"),
        ("user", "text", "a"),
        ("user", "video_url", "v.mp4"),
        ("user", "text", "b"),
        ("user", "audio_url", "2.wav"),
    ]


def test_placeholder_without_media_column_stays_text():
    row = {"conversations": [{"from": "human", "value": "<image>"}]}
    assert flat(convert("sharegpt", row)["messages"]) == [("user", "text", "<image>")]


def test_a_null_media_column_is_no_references():
    """datasets fills a media dataset's rows without images with null: their text is kept as is, and
    a placeholder there names an image the row does not give (a multimodal template refuses it)."""
    plain = {**_sharegpt(("human", "q"), ("gpt", "a")), "images": None}
    assert flat(convert("sharegpt", plain)["messages"]) == [("user", "text", "q"), ("assistant", "text", "a")]
    with pytest.raises(
        RowError, match=r"images has 0 reference\(s\) but the text has 1 <image> .*give the row"
    ) as caught:
        convert("sharegpt", {**_sharegpt(("human", "<image>q"), ("gpt", "a")), "images": None})
    assert (caught.value.reason, caught.value.field) == ("media_mismatch", "images")


# --- openai ---------------------------------------------------------------------------------------


def test_openai_tool_calls_reasoning_and_tool_results():
    call = {"id": "c1", "type": "function", "function": {"name": "add", "arguments": "{}"}}
    row = {
        "tools": [{"type": "function"}],
        "messages": [
            {"role": "user", "content": "1+1?"},
            {
                "role": "assistant",
                "content": None,
                "reasoning_content": "think",
                "tool_calls": [call],
            },
            {"role": "tool", "content": "2", "tool_call_id": "c1"},
            {"role": "assistant", "content": "2"},
        ],
    }
    blocks = flat(convert("openai", row)["messages"])
    assert [(r, k) for r, k, _ in blocks] == [
        ("system", "tools"),
        ("user", "text"),
        ("assistant", "reasoning"),
        ("assistant", "tool_calls"),
        ("tool", "text"),
        ("assistant", "text"),
    ]
    assert json.loads(blocks[3][2]) == call


def test_openai_content_parts():
    row = {
        "messages": [
            {
                "role": "user",
                "content": [
                    {"type": "text", "text": "what is"},
                    {"type": "image_url", "image_url": {"url": "x.png"}},
                ],
            }
        ]
    }
    assert flat(convert("openai", row)["messages"]) == [
        ("user", "text", "what is"),
        ("user", "image_url", "x.png"),
    ]


# --- pair -----------------------------------------------------------------------------------------


def test_pair_full_openai_conversations():
    def side(answer):
        return [{"role": "user", "content": "q"}, {"role": "assistant", "content": answer}]

    sample = convert("pair", {"chosen": side("good"), "rejected": side("bad")})
    assert flat(sample["chosen_messages"]) == [("user", "text", "q"), ("assistant", "text", "good")]
    assert flat(sample["rejected_messages"])[-1] == ("assistant", "text", "bad")


def test_pair_prompt_string_and_prompt_conversation():
    by_string = convert("pair", {"prompt": "q", "chosen": "a", "rejected": "b"})
    by_turns = convert(
        "pair",
        {
            "prompt": [{"role": "user", "content": "q"}],
            "chosen": [{"role": "assistant", "content": "a"}],
            "rejected": "b",
        },
    )
    assert by_string == by_turns


def test_pair_of_v1_messages_and_system_column():
    v1 = [{"role": "assistant", "content": [{"type": "text", "value": "a"}]}]
    sample = convert(
        "pair",
        {
            "system": "s",
            "messages": [{"role": "user", "content": "q"}],
            "chosen": v1,
            "rejected": "b",
        },
    )
    assert flat(sample["chosen_messages"]) == [
        ("system", "text", "s"),
        ("user", "text", "q"),
        ("assistant", "text", "a"),
    ]


def test_pair_with_sharegpt_tags():
    tags = {"role_tag": "r", "content_tag": "c", "user_tag": "u", "assistant_tag": "a"}
    row = {
        "conversations": [{"r": "u", "c": "q"}],
        "chosen": {"r": "a", "c": "y"},
        "rejected": {"r": "a", "c": "n"},
    }
    sample = convert("pair", row, tags=tags)
    assert flat(sample["rejected_messages"]) == [("user", "text", "q"), ("assistant", "text", "n")]


# --- messages (v1) --------------------------------------------------------------------------------


def test_messages_fills_default_loss_weight_and_drops_extra_keys():
    row = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": "q"}], "x": 1},
            {"role": "assistant", "content": [{"type": "text", "value": "a"}]},
        ]
    }
    assert [m["loss_weight"] for m in convert("messages", row)["messages"]] == [0.0, 1.0]
    assert "x" not in convert("messages", row)["messages"][0]


def test_messages_keeps_an_explicit_loss_weight():
    row = {"messages": [{"role": "assistant", "content": [], "loss_weight": 0}]}
    assert convert("messages", row)["messages"][0]["loss_weight"] == 0.0


# --- bad rows -------------------------------------------------------------------------------------


def _sharegpt(*turns):
    return {"conversations": [{"from": f, "value": v} for f, v in turns]}


BAD_ROWS = [
    (
        "sharegpt",
        _sharegpt(("human", "q"), ("gpt", "a"), ("bot", "x")),
        "unknown_role",
        "conversations[2].from",
    ),
    ("sharegpt", {"conversations": [{"from": "human"}]}, "missing_field", "conversations[0].value"),
    ("sharegpt", {"conversations": []}, "empty_conversation", "conversations"),
    ("sharegpt", {"conversations": "hi"}, "wrong_type", "conversations"),
    ("sharegpt", _sharegpt(("function_call", "{oops")), "invalid_json", "conversations[0].value"),
    (
        "sharegpt",
        _sharegpt(("function_call", "[1]")),
        "invalid_tool_call",
        "conversations[0].value",
    ),
    ("sharegpt", {**_sharegpt(("human", "q")), "tools": "{"}, "invalid_json", "tools"),
    (
        "sharegpt",
        {**_sharegpt(("human", "<image>")), "images": ["a", "b"]},
        "media_mismatch",
        "images",
    ),
    ("sharegpt", {**_sharegpt(("human", "<image>")), "images": None}, "media_mismatch", "images"),
    ("sharegpt", {**_sharegpt(("human", "<image>")), "images": []}, "media_mismatch", "images"),
    ("sharegpt", {**_sharegpt(("human", "<image>")), "images": [3]}, "wrong_type", "images[0]"),
    ("sharegpt", {**_sharegpt(("human", "<image>")), "images": {"a": 1}}, "wrong_type", "images"),
    ("alpaca", {"instruction": "q"}, "missing_field", "output"),
    ("alpaca", {"output": "a"}, "missing_field", "instruction"),
    ("alpaca", {"instruction": "q", "output": ["a", "b"]}, "wrong_type", "output"),
    ("alpaca", {"instruction": "q", "output": "  "}, "empty_text", "output"),
    ("alpaca", {"instruction": "", "input": "", "output": "a"}, "empty_text", "instruction"),
    ("alpaca", {"instruction": "q", "output": "a", "history": [["x"]]}, "wrong_type", "history[0]"),
    ("alpaca", ["not", "a", "row"], "wrong_type", None),
    (
        "messages",
        {"messages": [{"role": "user", "content": "hi"}]},
        "wrong_type",
        "messages[0].content",
    ),
    (
        "messages",
        {"messages": [{"role": "bot", "content": []}]},
        "unknown_role",
        "messages[0].role",
    ),
    (
        "messages",
        {"messages": [{"role": "user", "content": [{"type": "pdf", "value": ""}]}]},
        "unknown_content_type",
        "messages[0].content[0].type",
    ),
    (
        "messages",
        {"messages": [{"role": "user", "content": [{"type": "text", "value": 1}]}]},
        "wrong_type",
        "messages[0].content[0].value",
    ),
    (
        "messages",
        {"messages": [{"role": "user", "content": [], "loss_weight": float("nan")}]},
        "invalid_value",
        "messages[0].loss_weight",
    ),
    (
        "messages",
        {"messages": [{"role": "user", "content": [], "loss_weight": "1"}]},
        "wrong_type",
        "messages[0].loss_weight",
    ),
    ("openai", {"messages": [{"role": "user"}]}, "missing_field", "messages[0].content"),
    (
        "openai",
        {"messages": [{"role": "user", "content": "q", "tool_calls": [{}]}]},
        "invalid_tool_call",
        "messages[0].tool_calls",
    ),
    (
        "openai",
        {"messages": [{"role": "user", "content": [{"type": "file"}]}]},
        "unknown_content_type",
        "messages[0].content[0].type",
    ),
    ("pair", {"chosen": "a", "rejected": "b"}, "missing_field", "chosen"),
    ("pair", {"prompt": "q", "chosen": 1, "rejected": "b"}, "wrong_type", "chosen"),
    ("text", {"content": "x"}, "missing_field", "text"),
    ("text", {"text": ""}, "empty_text", "text"),
]


@pytest.mark.parametrize(("name", "row", "reason", "field"), BAD_ROWS)
def test_bad_rows_raise_row_error_with_reason_and_field(name, row, reason, field):
    with pytest.raises(RowError) as caught:
        convert(name, row)
    assert (caught.value.reason, caught.value.field) == (reason, field)


def test_unknown_role_message_says_what_is_expected():
    with pytest.raises(
        RowError,
        match=r"unknown role 'bot' in conversations\[2\]\.from; expected "
        r"one of human/gpt/system/function_call/observation",
    ):
        convert("sharegpt", _sharegpt(("human", "q"), ("gpt", "a"), ("bot", "x")))


def test_missing_field_lists_available_keys():
    with pytest.raises(RowError, match=r"available keys: \['instruction', 'response'\]"):
        convert("alpaca", {"instruction": "q", "response": "a"})


@pytest.mark.parametrize(
    ("value", "says"),
    [
        ('{"foo": 1}', "an object without a name"),
        ('[{"name": "f", "arguments": {}}, {"foo": 1}]', "a list with an item that is no such object"),
        ("[]", "got list"),
    ],
)
def test_a_function_call_that_is_no_call_is_refused_naming_the_turn(value, says):
    """chatml wrote any JSON inside <tool_call> and trained on it; a template refuses such a call."""
    row = {"conversations": [{"from": "human", "value": "q"}, {"from": "function_call", "value": value}]}
    with pytest.raises(RowError, match=says) as caught:
        convert("sharegpt", row)
    assert (caught.value.reason, caught.value.field) == ("invalid_tool_call", "conversations[1].value")
