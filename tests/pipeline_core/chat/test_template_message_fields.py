"""A message's ``name`` and a tool result's ``tool_call_id`` reach the chat template as transformers passes them.

Raw OpenAI rows go through the ``openai`` converter and the ``template`` strategy; the reference is
``transformers.apply_chat_template`` on the same raw messages. A template written here renders both
fields; the six shipped ones render neither, and must give the ids they gave before.
"""

from __future__ import annotations

import json

import orjson
import pytest

from pipeline_core import AutoTokenizer, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import FAMILY_NAMES, family_folder, reference

FIELDS_JINJA = (
    "{%- for message in messages %}"
    "{{- '<|im_start|>' + message.role }}"
    "{%- if message.name is defined %}{{- ' name=' + message.name }}{%- endif %}"
    "{%- if message.tool_call_id is defined %}{{- ' for=' + message.tool_call_id }}{%- endif %}"
    "{{- '\\n' }}{%- if message.content %}{{- message.content }}{%- endif %}"
    "{%- for call in message.tool_calls or [] %}"
    "{{- '<tool_call>' + call.id + ' ' + call.function.name + ' ' + call.function.arguments + '</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<|im_end|>\\n' }}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CALL = {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
ROWS = {
    "tool_round_trip": {
        "tools": TOOLS,
        "messages": [
            {"role": "user", "content": "Weather in Paris?", "name": "alice"},
            {"role": "assistant", "content": None, "tool_calls": [CALL]},
            {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call_7", "name": "get_weather"},
            {"role": "assistant", "content": "21 degrees."},
        ],
    },
    "named_participants": {
        "messages": [
            {"role": "system", "content": "Two users share this chat.", "name": "moderator"},
            {"role": "user", "content": "Hi, I am Bob.", "name": "bob"},
            {"role": "assistant", "content": "Hello Bob.", "name": "helper"},
            {"role": "user", "content": "And I am Carol.", "name": "carol"},
            {"role": "assistant", "content": "Hello Carol."},
        ],
    },
    "no_fields": {"messages": [{"role": "user", "content": "2+2?"}, {"role": "assistant", "content": "4"}]},
}


@pytest.fixture(scope="module")
def fields_folder(tmp_path_factory):
    return family_folder("qwen2.5", tmp_path_factory.mktemp("fields"), template=FIELDS_JINJA)


def expected_sample(ref, row: dict, train_tool_calls: bool = False) -> tuple[list[int], list[bool]]:
    """(ids, mask) from transformers alone, by the rules of chat/template.py: assistant turn ``k``
    spans ``render(messages[:k], add_generation_prompt=True)`` to ``render(messages[:k+1])``; a turn
    that only calls tools is not trained (the processors' default) unless ``train_tool_calls``. When
    a turn's renders do not extend each other and the whole one (a name written into the assistant
    header does that), the sample is the render through the last assistant turn, that turn alone
    trained."""
    messages, tools = row["messages"], row.get("tools")

    def render(upto: list[dict], generation_prompt: bool = False) -> str:
        return ref.apply_chat_template(upto, tools=tools, tokenize=False, add_generation_prompt=generation_prompt)

    turns = {
        k: (render(messages[:k], True), render(messages[: k + 1]), train_tool_calls or bool(m.get("content")))
        for k, m in enumerate(messages)
        if m["role"] == "assistant"
    }
    text = render(messages)
    spans = [(len(before), len(through)) for before, through, trained in turns.values() if trained]
    if not all(text.startswith(through) and through.startswith(before) for before, through, _ in turns.values()):
        before, text, _ = turns[max(turns)]
        spans = [(len(before), len(text))]
    encoded = ref(text, add_special_tokens=False, return_offsets_mapping=True)
    mask = [any(s <= a and b <= e for s, e in spans) for a, b in encoded["offset_mapping"]]
    return encoded["input_ids"], mask


def processed(folder, rows: list[dict], converter: str | None = "openai", **options):
    tok = AutoTokenizer.from_file(folder)
    strategy = StrategyFactory.create("template", tok)
    processor = ProcessorFactory.create_with_strategy("sft", tok, strategy, converter=converter, **options)
    return processor.process_batch(rows)


@pytest.mark.parametrize("name", sorted(ROWS))
def test_a_template_reading_name_and_tool_call_id_renders_them_as_transformers(fields_folder, name):
    row = ROWS[name]
    batch = processed(fields_folder, [row])
    assert not batch.errors, batch.errors
    ref = reference(fields_folder)
    ids, mask = expected_sample(ref, row)
    whole = ref.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=True)["input_ids"]
    assert batch.samples["sequence"][0].tolist() == ids == list(whole)  # every row ends with an answer
    assert batch.samples["loss_mask"][0].tolist() == mask


def test_the_fields_survive_the_exported_jsonl(fields_folder):
    """export writes the converted sample as a JSONL line; the cache stage reads it back as v1 messages."""
    from pipeline_core.converters import ConverterFactory

    convert = ConverterFactory.create("openai")
    lines = [orjson.loads(orjson.dumps(convert(row))) for row in ROWS.values()]
    assert any(m.get("tool_call_id") == "call_7" for m in lines[list(ROWS).index("tool_round_trip")]["messages"])
    batch = processed(fields_folder, lines, converter=None)
    assert not batch.errors, batch.errors
    ref = reference(fields_folder)
    assert [s.tolist() for s in batch.samples["sequence"]] == [expected_sample(ref, row)[0] for row in ROWS.values()]


def test_a_template_sees_the_fields_and_refuses_a_special_token_in_them(fields_folder):
    text = json.dumps(ROWS["named_participants"])
    row = json.loads(text.replace('"bob"', '"bob<|im_end|>"'))
    batch = processed(fields_folder, [row])
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "special_token_in_text")]
    assert batch.errors[0][1].field.endswith(".name")  # the field that holds it, not the content


@pytest.fixture(scope="module")
def shipped(tmp_path_factory) -> dict:
    return {name: family_folder(name, tmp_path_factory.mktemp(name.replace(".", "_"))) for name in FAMILY_NAMES}


@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_shipped_templates_render_the_rows_as_transformers(shipped, family):
    """None of them reads the fields: each row gives transformers' ids, or is refused where transformers
    raises (Phi-3.5 on the tool round trip's null content: test_null_content.py)."""
    folder = shipped[family]
    ref, rows = reference(folder), list(ROWS.values())
    batch = processed(folder, rows)
    errors, kept = dict(batch.errors), iter(batch.samples["sequence"])
    for i, row in enumerate(rows):
        if i in errors:
            assert errors[i].reason == "template_error", errors[i].message
            with pytest.raises(Exception):  # noqa: B017, PT011 - the template's own failure
                ref.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=False)
            continue
        expected = ref.apply_chat_template(row["messages"], tools=row.get("tools"), tokenize=True)["input_ids"]
        assert next(kept).tolist() == list(expected), f"row {i}"
