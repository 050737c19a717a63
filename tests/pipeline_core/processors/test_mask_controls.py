"""train_on_prompt, train_on_eos and pt's add_bos/add_eos, counted by hand on real family tokenizers."""

import numpy as np
import pytest

from pipeline_core import AutoTokenizer, ConfigError, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import family_folder

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


def test_train_on_prompt_trains_every_token_and_keeps_weights(qwen):
    p = ProcessorFactory.create("sft", qwen, strategy="chatml", train_on_prompt=True)
    row = {"messages": [*TWO_TURNS["messages"][:3], {**TWO_TURNS["messages"][3], "loss_weight": 0.5}]}
    out = p.process(row)
    assert out["loss_mask"].all()
    weights = out["loss_weight"].numpy()
    assert set(np.unique(weights).tolist()) == {0.5, 1.0}
    assert qwen.decode(out["sequence"][weights == 0.5].tolist()) == "Goodbye.<|im_end|>\n"
    assert p.describe()["train_on_prompt"] is True


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
