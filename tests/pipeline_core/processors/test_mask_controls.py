"""train_on_prompt, train_on_eos and pt's add_bos/add_eos, counted by hand on real family tokenizers."""

import json
import re

import numpy as np
import pytest

from pipeline_core import AutoTokenizer, ConfigError, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import family_folder, reference

TWO_TURNS = {
    "messages": [
        {"role": r, "content": [{"type": "text", "value": v}]}
        for r, v in zip(["user", "assistant"] * 2, ["hi", "Hello.", "bye", "Goodbye."])
    ]
}


@pytest.fixture(scope="module")
def qwen(tmp_path_factory) -> AutoTokenizer:
    return AutoTokenizer.from_file(family_folder("qwen2.5", tmp_path_factory.mktemp("qwen")))


def trained_text(tok, out) -> str:
    return tok.decode(out["sequence"][out["loss_mask"]].tolist())


@pytest.mark.parametrize("strategy", ["chatml", "template"])
def test_train_on_eos(qwen, strategy):
    def run(rule):
        p = ProcessorFactory.create("sft", qwen, strategy=strategy, train_on_eos=rule)
        return trained_text(qwen, p.process(TWO_TURNS))

    assert run("turn") == "Hello.<|im_end|>\nGoodbye.<|im_end|>\n"
    assert run("last") == "Hello.Goodbye.<|im_end|>\n"
    assert run("none") == "Hello.Goodbye."


@pytest.mark.parametrize("strategy", ["chatml", "template"])
def test_train_on_prompt_trains_every_token_and_keeps_weights(qwen, strategy):
    """Every token outside an assistant turn weighs 1; each assistant turn keeps its loss_weight,
    0 included (before, a turn the data marked 0 was trained at 1)."""
    p = ProcessorFactory.create("sft", qwen, strategy=strategy, train_on_prompt=True)
    messages = TWO_TURNS["messages"]
    row = {
        "messages": [messages[0], {**messages[1], "loss_weight": 0.0}, messages[2], {**messages[3], "loss_weight": 0.5}]
    }
    out = p.process(row)
    weights, ids = out["loss_weight"].numpy(), out["sequence"].numpy()
    assert set(np.unique(weights).tolist()) == {0.0, 0.5, 1.0}
    assert qwen.decode(ids[weights == 0.5].tolist()) == "Goodbye.<|im_end|>\n"
    assert qwen.decode(ids[weights == 0].tolist()) == "Hello.<|im_end|>\n"
    assert out["loss_mask"].numpy().tolist() == (weights > 0).tolist()
    assert p.describe()["train_on_prompt"] is True
    only_zero = {"messages": [messages[0], {**messages[1], "loss_weight": 0.0}]}
    assert [e.reason for _, e in p.process_batch([only_zero]).errors] == ["nothing_to_train"]


def test_train_on_eos_without_a_control_token_is_a_row_error(gpt2):
    p = ProcessorFactory.create(
        "sft", gpt2, strategy=StrategyFactory.create("chatml", gpt2, text_markers=True), train_on_eos="none"
    )
    batch = p.process_batch([TWO_TURNS])
    assert [e.reason for _, e in batch.errors] == ["no_end_token"] and batch.n_samples == 0


def test_controls_refuse_bad_values(qwen):
    with pytest.raises(ConfigError, match="train_on_eos"):
        ProcessorFactory.create("sft", qwen, train_on_eos="sometimes")
    with pytest.raises(ConfigError, match="train_on_prompt"):
        ProcessorFactory.create("sft", qwen, train_on_prompt=True, train_on_eos="none")


def test_pt_add_bos_and_add_eos(tmp_path):
    tok = AutoTokenizer.from_file(family_folder("llama3.1", tmp_path / "llama"))
    text = {"text": "Hello world"}
    body = tok.encode("Hello world")
    assert ProcessorFactory.create("pt", tok).process(text)["sequence"].tolist() == [*body, tok.eos_token_id]
    both = ProcessorFactory.create("pt", tok, add_bos=True).process(text)["sequence"].tolist()
    assert both == [tok.bos_token_id, *body, tok.eos_token_id]
    bare = ProcessorFactory.create("pt", tok, add_eos=False)
    assert bare.process(text)["sequence"].tolist() == body
    assert bare.describe()["add_eos"] is False


def test_pt_add_bos_needs_a_bos(gpt2):
    with pytest.raises(ConfigError, match="bos_token"):
        ProcessorFactory.create("pt", gpt2, add_bos=True)


@pytest.mark.parametrize("strategy", ["chatml", "template"])
def test_train_roles_adds_the_turns_of_other_roles(qwen, strategy):
    p = ProcessorFactory.create("sft", qwen, strategy=strategy, train_roles=["user", "assistant"])
    out = p.process(TWO_TURNS)
    assert trained_text(qwen, out) == "hi<|im_end|>\nHello.<|im_end|>\nbye<|im_end|>\nGoodbye.<|im_end|>\n"
    assert p.describe()["train_roles"] == ["assistant", "user"]
    users_only = ProcessorFactory.create("sft", qwen, strategy=strategy, train_roles=["user"])
    assert trained_text(qwen, users_only.process(TWO_TURNS)) == "hi<|im_end|>\nbye<|im_end|>\n"


def test_train_roles_is_checked(qwen):
    with pytest.raises(ConfigError, match="train_roles"):
        ProcessorFactory.create("sft", qwen, train_roles=["narrator"])
    assert ProcessorFactory.create("sft", qwen).strategy.trained_roles == {"assistant"}


CALL = {"name": "get_weather", "arguments": {"city": "Paris"}}
TOOL_ROW = {  # a tool call answered, then the final answer
    "messages": [
        {"role": "user", "content": [{"type": "text", "value": "Weather in Paris?"}]},
        {"role": "assistant", "content": [{"type": "tool_calls", "value": json.dumps(CALL)}]},
        {"role": "tool", "content": [{"type": "text", "value": "sunny"}]},
        {"role": "assistant", "content": [{"type": "text", "value": "It is sunny."}]},
    ]
}
TOOL_ROW_HF = [  # the same conversation as transformers takes it
    {"role": "user", "content": "Weather in Paris?"},
    {"role": "assistant", "content": "", "tool_calls": [{"type": "function", "function": CALL}]},
    {"role": "tool", "content": "sunny"},
    {"role": "assistant", "content": "It is sunny."},
]


def answers_in_reference(folder, messages) -> list[str]:
    """Each assistant turn's text between its header and <|im_end|>, in transformers' rendering."""
    text = reference(folder).apply_chat_template(messages, tokenize=False)
    return re.findall(r"<\|im_start\|>assistant\n(.*?)<\|im_end\|>", text, flags=re.S)


def with_final_answer(row: dict, hf: list[dict], answer: str) -> tuple[dict, list[dict]]:
    final = {"role": "assistant", "content": [{"type": "text", "value": answer}]}
    return {"messages": [*row["messages"][:-1], final]}, [*hf[:-1], {"role": "assistant", "content": answer}]


@pytest.mark.parametrize(("family", "answer"), [("qwen2.5", "It is sunny."), ("qwen3", "It is sunny."), ("qwen3", "")])
def test_train_on_eos_leaves_out_only_the_end_of_turn_not_the_answers_control_tokens(family, answer, tmp_path):
    """</tool_call> closes the answer and Qwen3's empty <think></think> opens it: both are special
    tokens of these tokenizers, and neither is an end of turn (before, </tool_call> was untrained,
    and so was the whole of a Qwen3 turn with an empty answer)."""
    folder = family_folder(family, tmp_path / family)
    tok = AutoTokenizer.from_file(folder)
    row, hf = with_final_answer(TOOL_ROW, TOOL_ROW_HF, answer)
    answers = answers_in_reference(folder, hf)
    trained = answers if family == "qwen2.5" else answers[-1:]  # Qwen3 trains its last turn only
    assert ("</tool_call>" in trained[0]) if family == "qwen2.5" else trained[0].startswith("<think>\n\n</think>")

    def run(rule):
        p = ProcessorFactory.create("sft", tok, strategy="template", train_on_eos=rule, train_tool_calls=True)
        return trained_text(tok, p.process(row))

    end = "<|im_end|>\n"
    assert run("turn") == "".join(a + end for a in trained)
    assert run("last") == "".join(trained) + end
    assert run("none") == "".join(trained)


@pytest.mark.parametrize("rule", ["last", "none"])
def test_an_empty_answer_that_would_train_no_token_is_nothing_to_train(qwen, rule):
    row = {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "value": ""}]},
        ]
    }
    p = ProcessorFactory.create("sft", qwen, strategy="chatml", train_on_eos=rule)
    batch = p.process_batch([row, TWO_TURNS])
    expected = [] if rule == "last" else [(0, "nothing_to_train")]
    assert [(i, e.reason) for i, e in batch.errors] == expected
    assert batch.n_samples == 2 - len(expected)


@pytest.mark.parametrize("text", ["\n", " ", "eot", "user"])
def test_a_trained_user_turn_is_found_where_the_template_writes_it(text, tmp_path):
    """A blank text, or one the template's own markup also holds (``eot`` in ``<|eot_id|>``,
    ``user`` in the header), was searched for and found in the wrong place; the expected turns are
    cut from transformers' rendering (Llama-3.1 trims a turn's text)."""
    folder = family_folder("llama3.1", tmp_path / "llama")
    tok = AutoTokenizer.from_file(folder)
    texts = [text, "Hello.", "hi", "Goodbye."]
    rendered = reference(folder).apply_chat_template(
        [{"role": r, "content": t} for r, t in zip(["user", "assistant"] * 2, texts)], tokenize=False
    )
    turns = re.findall(
        r"<\|start_header_id\|>(?:user|assistant)<\|end_header_id\|>\n\n(.*?<\|eot_id\|>)", rendered, re.S
    )
    row = {
        "messages": [
            {"role": r, "content": [{"type": "text", "value": t}]} for r, t in zip(["user", "assistant"] * 2, texts)
        ]
    }
    p = ProcessorFactory.create("sft", tok, strategy="template", train_roles=["user", "assistant"])
    assert trained_text(tok, p.process(row)) == "".join(turns)


LONG_ASK = {"query": "please summarise this long text " * 20, "response": "Short answer."}
SHORT_ASK = {"query": "hi", "response": "A long answer. " * 30}


@pytest.mark.parametrize("train_on_prompt", [False, True])
@pytest.mark.parametrize("strategy", ["chatml", "template"])
def test_a_sample_is_never_cut_before_its_answer_with_or_without_train_on_prompt(qwen, strategy, train_on_prompt):
    """train_on_prompt trains the prompt's tokens too, but the answer is what a truncated sample must
    keep: a prompt filling max_length is prompt_too_long either way (with train_on_prompt it was
    written as the prompt alone, every token trained, counted only as truncated)."""
    p = ProcessorFactory.create(
        "sft", qwen, strategy=strategy, train_on_prompt=train_on_prompt, max_length=64, overflow="truncate"
    )
    batch = p.process_batch([LONG_ASK, SHORT_ASK])
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "prompt_too_long")]
    kept = qwen.decode(batch.samples["sequence"][0].tolist())
    assert len(batch.samples["sequence"][0]) == 64 and "hi" in kept and "A long" in kept  # cut in the answer
    assert batch.truncated == 1


@pytest.mark.parametrize("train_on_prompt", [False, True])
def test_a_pack_cut_keeps_the_answer_with_or_without_train_on_prompt(qwen, train_on_prompt, tmp_path):
    """The same rule when bfd cuts an over-long sample to pack_size (overflow='truncate')."""
    from pipeline_core import CacheOptions, cache_file, load_h5, read_attrs

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (LONG_ASK, SHORT_ASK)))
    p = ProcessorFactory.create("sft", qwen, train_on_prompt=train_on_prompt, overflow="truncate")
    stats = cache_file(str(path), str(tmp_path / "out"), p, CacheOptions(pack_size=64, packing="bfd"))
    attrs = read_attrs(stats.output_url)
    assert attrs["skipped_by_reason"] == {"prompt_too_long": 1}
    assert attrs["samples_written"] == 1 and attrs["pack_truncated"] == 1
    assert "A long" in qwen.decode(load_h5(stats.output_url)["sequence"][0].tolist())
