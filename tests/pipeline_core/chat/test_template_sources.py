"""Which template renders a row, as transformers chooses it: chat_template.jinja, named templates; and
the message aliases it applies (reasoning read as `thinking`)."""

import json

import pytest

from pipeline_core import AutoTokenizer, ConfigError, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import family_folder, reference, template_text

DEFAULT = "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endfor %}"
DEFAULT += "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
TOOL_USE = "{{ '<|im_start|>system\nTOOLS ' + tools | tojson + '<|im_end|>\n' }}" + DEFAULT
TOOLS = [{"type": "function", "function": {"name": "get_weather"}}]


def row(with_tools: bool) -> dict:
    messages = [
        {"role": "user", "content": [{"type": "text", "value": "Weather?"}]},
        {"role": "assistant", "content": [{"type": "text", "value": "Sunny."}]},
    ]
    return {"messages": messages, **({"tools": TOOLS} if with_tools else {})}


def ids_of(tok, sample_row) -> list[int]:
    strategy = StrategyFactory.create("template", tok)
    return ProcessorFactory.create_with_strategy("sft", tok, strategy).process(sample_row)["sequence"].tolist()


def reference_ids(folder, with_tools: bool) -> list[int]:
    messages = [{"role": "user", "content": "Weather?"}, {"role": "assistant", "content": "Sunny."}]
    out = reference(folder).apply_chat_template(messages, tools=TOOLS if with_tools else None, tokenize=True)
    return list(out["input_ids"])


def test_named_templates_tool_use_for_rows_with_tools(tmp_path):
    folder = family_folder("qwen2.5", tmp_path / "named", template="")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "default", "template": DEFAULT}, {"name": "tool_use", "template": TOOL_USE}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    tok = AutoTokenizer.from_file(folder)
    assert set(tok.named_chat_templates) == {"default", "tool_use"}
    for with_tools in (False, True):
        assert ids_of(tok, row(with_tools)) == reference_ids(folder, with_tools)
    assert "TOOLS" in tok.decode(ids_of(tok, row(True)))
    described = StrategyFactory.create("template", tok).format_strings()
    assert described["chat_template"] == DEFAULT and described["chat_template_tool_use"] == TOOL_USE
    assert StrategyFactory.create("template", tok, template="tool_use").template == TOOL_USE


def test_named_templates_without_default_is_a_config_error(tmp_path):
    folder = family_folder("qwen2.5", tmp_path / "nodefault", template="")
    config = json.loads((folder / "tokenizer_config.json").read_text())
    config["chat_template"] = [{"name": "tool_use", "template": TOOL_USE}, {"name": "rag", "template": DEFAULT}]
    (folder / "tokenizer_config.json").write_text(json.dumps(config))
    with pytest.raises(ConfigError, match="none is 'default'"):
        StrategyFactory.create("template", AutoTokenizer.from_file(folder))


def test_chat_template_jinja_beside_the_config_wins(tmp_path):
    folder = family_folder("qwen2.5", tmp_path / "jinja", template=template_text("qwen2.5"))
    (folder / "chat_template.jinja").write_text(DEFAULT, encoding="utf-8")
    tok = AutoTokenizer.from_file(folder)
    assert tok.chat_template == DEFAULT
    assert ids_of(tok, row(False)) == reference_ids(folder, False)


def test_named_templates_transformers_saved_are_read_from_its_folder(tmp_path):
    """transformers saves named templates as additional_chat_templates/{name}.jinja (and the
    default as chat_template.jinja): h5pipe reads them there, as transformers' loader does."""
    source = family_folder("qwen2.5", tmp_path / "src", template="")
    saved = tmp_path / "saved"
    original = reference(source)
    original.chat_template = {"default": DEFAULT, "tool_use": TOOL_USE}
    original.save_pretrained(str(saved))
    assert (saved / "additional_chat_templates" / "tool_use.jinja").read_text(encoding="utf-8") == TOOL_USE
    tok = AutoTokenizer.from_file(saved)
    assert tok.named_chat_templates == {"default": DEFAULT, "tool_use": TOOL_USE}
    for with_tools in (False, True):
        assert ids_of(tok, row(with_tools)) == reference_ids(saved, with_tools)
    assert "TOOLS" in tok.decode(ids_of(tok, row(True)))


def test_a_chat_templates_folder_transformers_ignores_is_refused(tmp_path):
    folder = family_folder("qwen2.5", tmp_path / "old", template=DEFAULT)
    (folder / "chat_templates").mkdir()
    (folder / "chat_templates" / "tool_use.jinja").write_text(TOOL_USE, encoding="utf-8")
    assert "tool_use" not in (reference(folder).chat_template or {})  # transformers does not see it
    with pytest.raises(ConfigError, match="additional_chat_templates"):
        AutoTokenizer.from_file(folder)


THINKING = (  # a gpt-oss-style template: it reads a message's reasoning as `thinking`
    "{% for m in messages %}{{ '<|im_start|>' + m.role + '\n' }}"
    "{% if m.thinking %}{{ '<think>' + m.thinking + '</think>' }}{% endif %}{{ m.content + '<|im_end|>\n' }}"
    "{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


def test_reasoning_reaches_a_template_reading_thinking_as_in_transformers(tmp_path):
    from collections import Counter

    from pipeline_core.converters import ConverterFactory
    from tests.pipeline_core.chat.test_real_templates import check_rows

    folder = family_folder("qwen3", tmp_path / "thinking", template=THINKING)
    rows = [
        {"messages": [{"role": "user", "content": [{"type": "text", "value": "2+2?"}]},
                      {"role": "assistant", "content": [{"type": "reasoning", "value": "Two and two."},
                                                        {"type": "text", "value": "4"}]}]},
        {"messages": [{"role": "user", "content": [{"type": "text", "value": "3+3?"}]},
                      {"role": "assistant", "content": [{"type": "text", "value": "6"}],
                       "reasoning_content": "Three and three."}]},
    ]  # fmt: skip
    tok = AutoTokenizer.from_file(folder)
    assert check_rows(tok, reference(folder), rows, ConverterFactory.create("messages")) == Counter({"ok": 2})
    assert "<think>Three and three.</think>6" in tok.decode(ids_of(tok, rows[1]))


def test_a_control_token_escaped_in_tool_json_is_refused_like_a_plain_one(tmp_path):
    """``\\u003c|im_end|\\u003e`` in a tool call's JSON is no special-token string as written, but
    the template's tojson writes it back as <|im_end|>, which the render encodes as the control
    token (transformers does the same): refused as special_token_in_text, as the plain one is."""
    folder = family_folder("qwen2.5", tmp_path / "qwen")
    tok = AutoTokenizer.from_file(folder)
    escaped = json.dumps({"name": "note", "arguments": {"text": "<|im_end|>"}}).replace("<", "\\u003c")
    escaped = escaped.replace(">", "\\u003e")
    assert "<|im_end|>" not in escaped
    call = {"type": "function", "function": json.loads(escaped)}
    hf = [{"role": "user", "content": "hi"}, {"role": "assistant", "content": "", "tool_calls": [call]}]
    assert '"text": "<|im_end|>"' in reference(folder).apply_chat_template(hf, tokenize=False)
    user = {"role": "user", "content": [{"type": "text", "value": "hi"}]}
    answer = {"role": "assistant", "content": [{"type": "tool_calls", "value": escaped}]}
    processor = ProcessorFactory.create("sft", tok, strategy="template", train_tool_calls=True)
    batch = processor.process_batch([{"messages": [user, answer]}])
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "special_token_in_text")]
