"""The ``template`` strategy: ids equal ``apply_chat_template`` and the assistant mask is exact.

Templates are written here: a ChatML family (with tools and tool calls), the same with
``{% generation %}`` blocks, a Llama-3 family (header special tokens, ``trim``) and a Zephyr family.
The messages given to ``apply_chat_template`` are built here from the v1 messages, and the
expected masked-in text is what each template writes for an assistant turn.
"""

import json

import numpy as np
import pytest

from pipeline_core import ConfigError, ProcessorFactory, RowError, StrategyFactory
from pipeline_core.converters import ConverterFactory
from tests.pipeline_core.processors.test_messages_helpers import (
    FIXTURES,
    fixture_rows,
    tokenizer_with_specials,
    weights_of,
)

CHATML_ASSISTANT = (
    "{{- '<｜im▁start｜>assistant\\n' }}{GEN}"
    "{{- message.content }}"
    "{%- for call in message.tool_calls or [] %}"
    "{{- '\\n<tool_call>\\n' + call.function | tojson + '\\n</tool_call>' }}"
    "{%- endfor %}"
    "{{- '<｜im▁end｜>\\n' }}{END}"
)
CHATML_JINJA = (
    "{%- if tools %}"
    "{{- '<｜im▁start｜>system\\n' }}"
    "{%- if messages[0].role == 'system' %}{{- messages[0].content + '\\n\\n' }}{%- endif %}"
    "{{- '# Tools\\n<tools>' }}"
    "{%- for tool in tools %}{{- '\\n' + tool | tojson }}{%- endfor %}"
    "{{- '\\n</tools><｜im▁end｜>\\n' }}"
    "{%- elif messages[0].role == 'system' %}"
    "{{- '<｜im▁start｜>system\\n' + messages[0].content + '<｜im▁end｜>\\n' }}"
    "{%- endif %}"
    "{%- for message in messages %}"
    "{%- if message.role == 'system' and loop.first %}"
    "{%- elif message.role == 'assistant' %}" + CHATML_ASSISTANT + "{%- else %}"
    "{{- '<｜im▁start｜>' + message.role + '\\n' + message.content + '<｜im▁end｜>\\n' }}"
    "{%- endif %}"
    "{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<｜im▁start｜>assistant\\n' }}{%- endif %}"
)
CHATML_PREFIX = CHATML_JINJA.replace("{GEN}", "").replace("{END}", "")
CHATML_GENERATION = CHATML_JINJA.replace("{GEN}", "{%- generation %}").replace("{END}", "{%- endgeneration %}")
LLAMA3_JINJA = (
    "{% set loop_messages = messages %}{% for message in loop_messages %}"
    "{% set content = '<|start_header_id|>' + message['role'] + '<|end_header_id|>\n\n' + "
    "message['content'] | trim + '<|eot_id|>' %}"
    "{% if loop.index0 == 0 %}{% set content = bos_token + content %}{% endif %}{{ content }}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}"
)
LLAMA3_SPECIALS = ["<|begin_of_text|>", "<|start_header_id|>", "<|end_header_id|>", "<|eot_id|>"]
ZEPHYR_JINJA = (
    "{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + eos_token + '\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}"
)


def chatml_turn(message: dict) -> str:
    calls = "".join(
        "\n<tool_call>\n" + json.dumps(c["function"], ensure_ascii=False) + "\n</tool_call>"
        for c in message.get("tool_calls", [])
    )
    return message["content"] + calls + "<｜im▁end｜>\n"


ASSISTANT_TEXT = {
    "chatml": chatml_turn,
    "llama3": lambda m: m["content"].strip() + "<|eot_id|>",
    "zephyr": lambda m: m["content"] + "<｜end▁of▁sentence｜>\n",
}


def plain_messages(v1: list[dict]) -> tuple[list[dict], list | None, list[int]]:
    """What a user passes to apply_chat_template: (messages, tools, v1 index of each message)."""
    out, tools, owners = [], None, []
    for i, m in enumerate(v1):
        for b in m["content"]:
            if b["type"] == "tools":
                tools = (tools or []) + json.loads(b["value"])
        if all(b["type"] == "tools" for b in m["content"]):
            continue
        msg = {"role": m["role"], "content": "".join(b["value"] for b in m["content"] if b["type"] == "text")}
        calls = [json.loads(b["value"]) for b in m["content"] if b["type"] == "tool_calls"]
        if calls:
            msg["tool_calls"] = [{"type": "function", "function": c} for c in calls]
        out.append(msg)
        owners.append(i)
    return out, tools, owners


def expected_in(v1: list[dict], family: str, train_on: str = "all") -> str:
    messages, _, owners = plain_messages(v1)
    weights = weights_of(v1, train_on)
    return "".join(ASSISTANT_TEXT[family](m) for m, i in zip(messages, owners) if weights[i] > 0)


def check_template_sample(tok, seq, mask, weight, v1, family, train_on="all"):
    messages, tools, _ = plain_messages(v1)
    assert np.asarray(seq).tolist() == tok.apply_chat_template(messages, tools=tools)
    assert mask.size == seq.size == weight.size and np.array_equal(weight > 0, mask)
    assert tok.decode(seq[mask].tolist()) == expected_in(v1, family, train_on)


@pytest.fixture(scope="module")
def llama3(trained, tmp_path_factory):
    tok = tokenizer_with_specials(
        trained,
        tmp_path_factory.mktemp("llama3"),
        LLAMA3_SPECIALS,
        bos_token="<|begin_of_text|>",
        eos_token="<|eot_id|>",
    )
    tok.set_chat_template(LLAMA3_JINJA)
    return tok


@pytest.fixture(scope="module")
def tok(trained, tmp_path_factory):
    """A copy of ``trained`` that the tests may give chat templates (the session fixture stays bare)."""
    return tokenizer_with_specials(trained, tmp_path_factory.mktemp("chat"), [])


def with_template(tok, template):
    tok.set_chat_template(template)
    return tok


def template_processor(kind, tok, template, **kwargs):
    strategy = StrategyFactory.create("template", tok, template=template)
    return ProcessorFactory.create_with_strategy(kind, tok, strategy, **kwargs)


SFT_FILES = [n for n, (_, kind) in FIXTURES.items() if kind == "sft"]
# every sft fixture with the prefix-masked template; the generation variant skips the largest file
TEMPLATE_CASES = [(n, "prefix") for n in SFT_FILES] + [
    (n, "generation") for n in SFT_FILES if n != "alpaca_en_demo.json"
]


@pytest.mark.parametrize("file_name, mask", TEMPLATE_CASES)
def test_chatml_template_on_sft_fixtures(tok, llamafactory, file_name, mask):
    template = CHATML_GENERATION if mask == "generation" else CHATML_PREFIX
    rows, convert = fixture_rows(llamafactory, file_name)
    tok = with_template(tok, template)
    processor = template_processor("sft", tok, None, converter=convert, media="keep")
    assert processor.strategy.mask_source == mask
    batch = processor.process_batch(rows)
    assert not batch.errors and batch.n_samples == len(rows)
    s = batch.samples
    for i, row in enumerate(rows):
        v1 = convert(row)["messages"]
        check_template_sample(tok, s["sequence"][i], s["loss_mask"][i], s["loss_weight"][i], v1, "chatml")


@pytest.mark.parametrize("file_name", [n for n, (_, kind) in FIXTURES.items() if kind == "dpo"])
def test_chatml_template_on_dpo_fixtures(tok, llamafactory, file_name):
    rows, convert = fixture_rows(llamafactory, file_name)
    tok = with_template(tok, CHATML_PREFIX)
    batch = template_processor("dpo", tok, None, converter=convert).process_batch(rows)
    assert not batch.errors and batch.n_samples == len(rows)
    for i, row in enumerate(rows):
        pair = convert(row)
        for side in ("chosen", "rejected"):
            seq, mask, weight = (batch.samples[k][i] for k in (side, f"{side}_mask", f"{side}_weight"))
            check_template_sample(tok, seq, mask, weight, pair[f"{side}_messages"], "chatml", train_on="last")


@pytest.mark.parametrize("file_name", ["identity.json", "v1_sft_demo.jsonl", "mllm_demo.json"])
def test_llama3_template_family(llama3, llamafactory, file_name):
    rows, convert = fixture_rows(llamafactory, file_name)
    batch = template_processor("sft", llama3, None, converter=convert, media="keep").process_batch(rows)
    assert not batch.errors and batch.n_samples == len(rows)
    s = batch.samples
    for i, row in enumerate(rows):
        v1 = convert(row)["messages"]
        check_template_sample(llama3, s["sequence"][i], s["loss_mask"][i], s["loss_weight"][i], v1, "llama3")
        assert s["sequence"][i][0] == llama3.bos_token_id


def test_zephyr_template_family_multi_turn(tok, llamafactory):
    rows, _ = fixture_rows(llamafactory, "identity.json")
    # the alpaca converter reads a history column by default (a v0 dataset_info entry only when mapped)
    convert = ConverterFactory.create("alpaca")
    tok = with_template(tok, ZEPHYR_JINJA)
    rows = [{**r, "history": [[rows[i - 1]["instruction"], rows[i - 1]["output"]]]} for i, r in enumerate(rows)]
    batch = template_processor("sft", tok, None, converter=convert).process_batch(rows)
    assert not batch.errors
    for i, row in enumerate(rows):
        v1 = convert(row)["messages"]
        assert len(v1) == 4
        check_template_sample(
            tok,
            batch.samples["sequence"][i],
            batch.samples["loss_mask"][i],
            batch.samples["loss_weight"][i],
            v1,
            "zephyr",
        )


def test_template_train_on_last(tok):
    tok = with_template(tok, CHATML_PREFIX)
    row = {"query": "q", "response": "r"}
    conv = {
        "messages": [{"role": r, "content": [{"type": "text", "value": r[0] * 3}]} for r in ["user", "assistant"] * 2]
    }
    processor = template_processor("sft", tok, None, train_on="last")
    out = processor.process(conv)
    assert tok.decode(out["sequence"][out["loss_mask"]].tolist()) == "aaa<｜im▁end｜>\n"
    assert processor.process(row)["sequence"].tolist() == tok.apply_chat_template(
        [{"role": "user", "content": "q"}, {"role": "assistant", "content": "r"}]
    )


def test_template_without_prefix_property_is_a_config_error(tok):
    tok = with_template(tok, "{{ messages | length }}{% for m in messages %}{{ m.content }}{% endfor %}")
    with pytest.raises(ConfigError, match="prefix.*generation"):
        StrategyFactory.create("template", tok)


def test_template_with_token_across_the_edge_is_a_config_error(tok):
    # "assistant: " + "Hi!": the space and the word are one token, half prompt, half answer
    glued = "{% for m in messages %}{{ m.role + ': ' + m.content + '\n' }}{% endfor %}"
    glued += "{% if add_generation_prompt %}assistant: {% endif %}"
    with pytest.raises(ConfigError, match="crosses the start or end"):
        StrategyFactory.create("template", tok, template=glued)


def generation_on(condition: str) -> str:
    return CHATML_PREFIX.replace(
        "{{- message.content }}",
        f"{{% if {condition} %}}{{% generation %}}{{{{ message.content }}}}{{% endgeneration %}}"
        "{% else %}{{ message.content }}{% endif %}",
    )


def test_generation_blocks_on_the_last_turn_only_train_the_last_turn(tok):
    # what transformers' return_assistant_tokens_mask gives for such a template: the last turn only
    conv = {
        "messages": [
            {"role": r, "content": [{"type": "text", "value": c * 3}]}
            for r, c in zip(["user", "assistant"] * 2, "abcd")
        ]
    }
    out = template_processor("sft", tok, generation_on("loop.last")).process(conv)
    assert tok.decode(out["sequence"][out["loss_mask"]].tolist()) == "ddd"
    first_only = template_processor("sft", tok, generation_on("loop.index0 == 1"))
    with pytest.raises(RowError, match="span"):
        first_only.process(conv)


def test_template_needs_a_chat_template(trained):
    assert trained.chat_template is None
    with pytest.raises(ConfigError, match="chat_template"):
        StrategyFactory.create("template", trained)


def test_template_row_errors_are_reported(tok):
    no_tools = CHATML_PREFIX.replace(
        "{%- for message in messages %}",
        "{%- for message in messages %}{% if message.role == 'tool' %}{{ raise_exception('no tool role') }}{% endif %}",
    )
    processor = template_processor("sft", tok, no_tools)
    user = {"role": "user", "content": [{"type": "text", "value": "say <｜im▁end｜> please"}]}
    answer = {"role": "assistant", "content": [{"type": "text", "value": "ok"}]}
    tool = {"role": "tool", "content": [{"type": "text", "value": "42"}]}
    batch = processor.process_batch(
        [{"messages": [user, answer]}, {"messages": [tool, answer]}, {"query": "a", "response": "b"}]
    )
    assert batch.rows.tolist() == [2]
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "special_token_in_text"), (1, "template_error")]
    assert "no tool role" in batch.errors[1][1].message
    with pytest.raises(RowError, match="special token"):
        processor.process({"messages": [user, answer]})


def test_template_describes_its_source(tok):
    processor = template_processor("sft", tok, CHATML_GENERATION)
    described = processor.describe()
    assert described["strategy"] == "template"
    tokens = {
        "chat_template": CHATML_GENERATION,
        "mask": "generation",
        "special_token_check": "json_unescaped",
        "message_fields": "name,tool_call_id",
        "null_content": "dropped",
    }
    assert described["strategy_tokens"] == tokens
