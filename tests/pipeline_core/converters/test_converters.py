"""Converters on LLaMA-Factory's own demo datasets, checked against expectations computed from
the raw rows; plus the registry and dataset_info selection."""

from __future__ import annotations

import json
import os
from functools import cache
from pathlib import Path

import pytest

from pipeline_core.converters import (
    ConverterFactory,
    PairConverter,
    converter_from_dataset_info,
    converter_spec,
)
from pipeline_core.errors import ConfigError, RowError

SHAREGPT_ROLES = {
    "human": "user",
    "gpt": "assistant",
    "system": "system",
    "observation": "tool",
    "function_call": "assistant",
}


def fixtures_dir() -> Path:
    path = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
    if not path.is_dir():
        if os.environ.get("CI") == "true":
            pytest.fail(f"test fixtures missing at {path}")
        pytest.skip(f"test fixtures missing at {path}")
    return path


@cache
def _load(name: str) -> tuple:
    path = fixtures_dir() / "llamafactory" / name
    if name.endswith(".jsonl"):
        return tuple(json.loads(line) for line in path.read_text("utf-8").splitlines() if line)
    return tuple(json.loads(path.read_text("utf-8")))


def dataset_info() -> dict:
    return json.loads((fixtures_dir() / "llamafactory" / "dataset_info.json").read_text("utf-8"))


def convert_dataset(name: str) -> tuple[tuple, list[dict]]:
    entry = dataset_info()[name]
    rows = _load(entry["file_name"])
    convert = converter_from_dataset_info(entry)
    return rows, [convert(row) for row in rows]


def flat(messages: list[dict]) -> list[tuple[str, str, str]]:
    return [(m["role"], b["type"], b["value"]) for m in messages for b in m["content"]]


# --- every fixture converts -----------------------------------------------------------------

DATASETS = [
    "identity",
    "alpaca_en_demo",
    "glaive_toolcall_en_demo",
    "mllm_demo",
    "dpo_en_demo",
    "c4_demo",
]


@pytest.mark.parametrize("name", DATASETS)
def test_every_dataset_info_entry_converts_every_row(name):
    rows, samples = convert_dataset(name)
    assert len(samples) == len(rows) > 0


def test_dataset_info_lists_exactly_the_tested_datasets():
    assert sorted(dataset_info()) == sorted(DATASETS)


@pytest.mark.parametrize("file_name", ["v1_sft_demo.jsonl", "v1_dpo_demo.jsonl"])
def test_v1_fixtures_are_already_standard(file_name):
    convert = converter_from_dataset_info({"file_name": file_name, "converter": "messages"})
    rows = _load(file_name)
    assert [convert(row) for row in rows] == list(rows)


# --- spot checks computed from the raw rows ---------------------------------------------------


def _alpaca_expected(row: dict) -> list[tuple[str, str, str]]:
    user = row["instruction"] + ("\n" + row["input"] if row["input"] else "")
    return [("user", "text", user), ("assistant", "text", row["output"])]


@pytest.mark.parametrize("name", ["identity", "alpaca_en_demo"])
def test_alpaca_rows_become_user_and_assistant_turns(name):
    rows, samples = convert_dataset(name)
    for row, sample in zip(rows, samples, strict=True):
        assert flat(sample["messages"]) == _alpaca_expected(row)
        assert [m["loss_weight"] for m in sample["messages"]] == [0.0, 1.0]


def _glaive_expected(row: dict) -> list[tuple[str, str, str]]:
    expected = [("system", "tools", row["tools"])] if json.loads(row["tools"]) else []
    for turn in row["conversations"]:
        kind = "tool_calls" if turn["from"] == "function_call" else "text"
        expected.append((SHAREGPT_ROLES[turn["from"]], kind, turn["value"]))
    return expected


def test_glaive_roles_texts_and_tools_match_the_conversations():
    rows, samples = convert_dataset("glaive_toolcall_en_demo")
    for row, sample in zip(rows, samples, strict=True):
        assert flat(sample["messages"]) == _glaive_expected(row)


def test_glaive_has_tool_calls_and_observations():
    _, samples = convert_dataset("glaive_toolcall_en_demo")
    kinds = {(role, kind) for s in samples for role, kind, _ in flat(s["messages"])}
    assert {("assistant", "tool_calls"), ("tool", "text"), ("system", "tools")} <= kinds


def test_dpo_pairs_share_the_prompt_and_end_with_their_response():
    rows, samples = convert_dataset("dpo_en_demo")
    for row, sample in zip(rows, samples, strict=True):
        chosen, rejected = sample["chosen_messages"], sample["rejected_messages"]
        prompt = [(SHAREGPT_ROLES[t["from"]], "text", t["value"]) for t in row["conversations"]]
        assert flat(chosen[:-1]) == flat(rejected[:-1]) == prompt
        assert flat(chosen[-1:]) == [("assistant", "text", row["chosen"]["value"])]
        assert flat(rejected[-1:]) == [("assistant", "text", row["rejected"]["value"])]


def test_mllm_images_are_kept_in_order_where_their_placeholders_were():
    rows, samples = convert_dataset("mllm_demo")
    for row, sample in zip(rows, samples, strict=True):
        blocks = flat(sample["messages"])
        assert [value for _, kind, value in blocks if kind == "image_url"] == row["images"]
        texts = ["".join(v for _, k, v in flat([m]) if k == "text") for m in sample["messages"]]
        assert texts == [m["content"].replace("<image>", "") for m in row["messages"]]


def test_mllm_placeholder_position_decides_block_order():
    _, samples = convert_dataset("mllm_demo")
    first = samples[0]["messages"]  # "<image>Who are they?" ... "What are they doing?<image>"
    assert [b["type"] for b in first[0]["content"]] == ["image_url", "text"]
    assert [b["type"] for b in first[2]["content"]] == ["text", "image_url"]


def test_c4_rows_pass_through_as_text():
    rows, samples = convert_dataset("c4_demo")
    assert samples == [{"text": row["text"]} for row in rows]


# --- registry -----------------------------------------------------------------------------------


def test_registry_lists_the_builtin_converters():
    assert {"alpaca", "sharegpt", "openai", "pair", "dpo", "messages", "text"} <= set(ConverterFactory.names())


def test_unknown_converter_lists_registered_names():
    with pytest.raises(ConfigError, match="registered converters: alpaca, dpo"):
        ConverterFactory.create("alpacca")


def test_misspelt_option_fails_at_creation():
    with pytest.raises(ConfigError, match="accepted options: columns"):
        ConverterFactory.create("alpaca", colums={"prompt": "q"})


def test_unknown_column_key_lists_the_expected_keys():
    with pytest.raises(ConfigError, match="expected some of"):
        ConverterFactory.create("alpaca", columns={"messages": "conversations"})


def test_dpo_is_an_alias_of_pair():
    assert isinstance(ConverterFactory.create("dpo"), PairConverter)


@pytest.fixture
def scratch_registry(monkeypatch):
    monkeypatch.setattr(ConverterFactory, "_makers", dict(ConverterFactory._makers))


def test_register_a_class_and_a_function(scratch_registry):
    @ConverterFactory.register("upper")
    class Upper:
        def __init__(self, column: str = "text") -> None:
            self.column = column

        def __call__(self, row):
            return {"text": row[self.column].upper()}

    @ConverterFactory.register("echo", "same")
    def make_echo():
        return dict

    assert ConverterFactory.create("upper", column="t")({"t": "ab"}) == {"text": "AB"}
    assert ConverterFactory.create("same")({"a": 1}) == {"a": 1}


def test_a_taken_name_cannot_be_registered_again(scratch_registry):
    with pytest.raises(ConfigError, match="already registered"):
        ConverterFactory.register("alpaca")(lambda: dict)


# --- dataset_info selection -------------------------------------------------------------------


OFF = {"system": None, "tools": None, "images": None, "videos": None, "audios": None}  # v0: read only when mapped


@pytest.mark.parametrize(
    ("entry", "spec"),
    [
        # v0: what LLaMA-Factory's parser reads; every other column off (None)
        ({"file_name": "a.json"}, ("alpaca", {"columns": {"history": None, **OFF}})),
        ({"converter": "openai"}, ("openai", {})),
        (
            {"converter": "sharegpt", "tags": {"role_tag": "r"}},
            ("sharegpt", {"tags": {"role_tag": "r"}}),
        ),
        ({"columns": {"prompt": "text"}}, ("text", {"column": "text"})),
        (
            {"columns": {"prompt": "q", "response": "a"}},
            ("alpaca", {"columns": {"prompt": "q", "query": None, "response": "a", "history": None, **OFF}}),
        ),
        ({"formatting": "sharegpt"}, ("sharegpt", {"columns": OFF, "turn_order": True})),
        (
            {"ranking": True, "columns": {"prompt": "q", "chosen": "c", "rejected": "r"}},
            (
                "pair",
                {
                    "columns": {"prompt": "q", "query": None, "history": None, "chosen": "c", "rejected": "r", **OFF},
                    "prompt_from": "alpaca",
                },
            ),
        ),
    ],
)
def test_converter_spec(entry, spec):
    assert converter_spec(entry) == spec


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"converter": "alpaca", "formatting": "alpaca"}, "keep only one style"),
        ({"formatting": "openai"}, "expected one of alpaca, sharegpt"),
        ({"columns": {"kto_tag": "label"}}, "not supported"),
        ({"tags": {"role_tag": "role"}}, "only apply to formatting 'sharegpt'"),
        ({"converter": "nope"}, "registered converters"),
        ("alpaca", "must be an object"),
        ({"columns": ["prompt"]}, "'columns' must be an object"),
    ],
)
def test_bad_dataset_info_entries(entry, message):
    with pytest.raises(ConfigError, match=message):
        converter_from_dataset_info(entry)


@pytest.mark.parametrize("columns", [None, {"prompt": "instruction", "query": "input"}])
def test_an_alpaca_ranking_entry_never_takes_its_prompt_from_a_conversation_column(columns):
    """LLaMA-Factory builds an alpaca pair's prompt from instruction + input only; a messages or
    conversations column beside them was read first."""
    entry = {"ranking": True, **({"columns": columns} if columns else {})}
    other = {"messages": [{"role": "user", "content": "other"}], "conversations": [{"from": "human", "value": "x"}]}
    row = {"instruction": "Sum", "input": "1+1", "chosen": "2", "rejected": "3", **other}
    sample = converter_from_dataset_info(entry)(row)
    assert flat(sample["chosen_messages"]) == [("user", "text", "Sum\n1+1"), ("assistant", "text", "2")]


def test_a_sharegpt_ranking_entry_takes_its_prompt_from_the_conversation_only():
    entry = {"ranking": True, "formatting": "sharegpt"}
    row = {
        "instruction": "not read",
        "chosen": {"from": "gpt", "value": "2"},
        "rejected": {"from": "gpt", "value": "3"},
    }
    with pytest.raises(RowError, match="no prompt found \\(looked for conversations\\)"):
        converter_from_dataset_info(entry)(row)


def test_alpaca_ranking_entry_builds_pairs_from_instruction_and_input():
    entry = {
        "ranking": True,
        "columns": {
            "prompt": "instruction",
            "query": "input",
            "chosen": "chosen",
            "rejected": "rejected",
        },
    }
    row = {"instruction": "Sum", "input": "1+1", "chosen": "2", "rejected": "3"}
    sample = converter_from_dataset_info(entry)(row)
    assert flat(sample["chosen_messages"]) == [
        ("user", "text", "Sum\n1+1"),
        ("assistant", "text", "2"),
    ]
    assert flat(sample["rejected_messages"])[-1] == ("assistant", "text", "3")
