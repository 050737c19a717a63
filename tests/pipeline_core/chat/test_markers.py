"""Markers follow the tokenizer: chatml's turn markers and alpaca's end are the tokenizer's own control ids."""

import pytest

from pipeline_core import AutoTokenizer, ConfigError, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import family_folder


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> AutoTokenizer:
    return AutoTokenizer.from_file(family_folder("qwen2.5", tmp_path_factory.mktemp("qwen")))


def test_chatml_writes_each_marker_as_the_tokenizers_one_id(qwen):
    s = StrategyFactory.create("chatml", qwen)
    start, end = qwen.token_to_id("<|im_start|>"), qwen.token_to_id("<|im_end|>")
    newline = qwen.encode("\n")
    assert s.prompt_prefix.tolist() == [start, *qwen.encode("user"), *newline]
    assert s.prompt_suffix.tolist() == [end, *newline, start, *qwen.encode("assistant"), *newline]
    assert s.response_suffix.tolist() == [end, *newline]
    assert s.format_strings()["system_start"] == "<|im_start|>system\n"


def test_chatml_keeps_the_full_width_markers_of_a_trained_tokenizer(trained):
    s = StrategyFactory.create("chatml", trained)
    assert s.prompt_prefix[0] == trained.token_to_id("<｜im▁start｜>")
    assert s.format_strings()["user_end"] == "<｜im▁end｜>\n"


def test_chatml_on_plain_gpt2_is_a_config_error_naming_the_fixes(gpt2, gpt2_path):
    with pytest.raises(ConfigError) as e:
        StrategyFactory.create("chatml", gpt2)
    message = str(e.value)
    assert "<|im_start|>" in message and str(gpt2_path) in message
    assert "text_markers=True" in message and "user_start=" in message
    with pytest.raises(ConfigError, match="text_markers"):
        ProcessorFactory.create("sft", gpt2)  # the default strategy of sft is chatml


def test_text_markers_accepts_plain_text_markers_knowingly(gpt2):
    s = StrategyFactory.create("chatml", gpt2, text_markers=True)
    assert gpt2.decode(s.prompt_prefix.tolist()) == "<｜im▁start｜>user\n"
    assert len(s.prompt_prefix) > 3  # text pieces, accepted on purpose


def test_explicit_markers_win(gpt2, qwen):
    markers = {f"{r}_{e}": f"[{r} {e}]" for r in ("user", "assistant", "system", "tool") for e in ("start", "end")}
    s = StrategyFactory.create("chatml", gpt2, **markers)
    assert gpt2.decode(s.prompt_prefix.tolist()) == "[user start]"
    s = StrategyFactory.create("chatml", qwen, user_start="<|im_start|>human\n")
    assert s.format_strings()["user_start"] == "<|im_start|>human\n"
    assert s.format_strings()["assistant_start"] == "<|im_start|>assistant\n"


def test_alpaca_suffix_is_the_tokenizers_eos(gpt2, qwen):
    s = StrategyFactory.create("alpaca", gpt2)
    assert s.response_suffix.tolist() == [gpt2.eos_token_id]
    assert StrategyFactory.create("alpaca", qwen).response_suffix.tolist() == [qwen.token_to_id("<|im_end|>")]


def test_alpaca_without_eos_is_a_config_error(gpt2_path):
    no_eos = AutoTokenizer.from_file(gpt2_path)
    with pytest.raises(ConfigError, match="response_suffix"):
        StrategyFactory.create("alpaca", no_eos)
    assert (
        StrategyFactory.create("alpaca", no_eos, response_suffix="</s>").format_strings()["response_suffix"] == "</s>"
    )
