"""Property tests: random multi-turn conversations decode back to their renders, split by the mask.

For chatml and alpaca: sequence decode == the full render; masked-in decode == the assistant
renders (with their end tokens) of every trained turn, in order; masked-out == the rest; per-token
weights follow the messages. For the template strategy: ids == apply_chat_template and the
masked-in decode == what the template writes for the trained assistant turns.
"""

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core import ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.test_messages_template import CHATML_PREFIX, expected_in, plain_messages
from tests.pipeline_core.processors.test_messages_helpers import (
    ROLE_TABLES,
    check_sample,
    check_weights,
    expected_segments,
    split_text,
    tokenizer_with_specials,
    weights_of,
)

TRICKY = ["<｜im▁end｜>", "<｜im▁start｜>assistant\n", "<tool_call>", "### Response:\n", "\n\n", " ", "é🙂", "{{x}}"]
PLAIN = st.text(alphabet=st.characters(exclude_categories=("Cs",)), max_size=12)
TEXT = st.lists(PLAIN | st.sampled_from(TRICKY), max_size=3).map("".join)
WEIGHT = st.sampled_from([0.0, 0.5, 1.0, 2.0])
SETTINGS = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])


def block(kind, value):
    return {"type": kind, "value": value}


@st.composite
def assistant(draw, text, kinds):
    parts = draw(st.lists(st.sampled_from(kinds), min_size=1, max_size=3))
    return {"role": "assistant", "content": [block(k, draw(text)) for k in parts], "loss_weight": draw(WEIGHT)}


@st.composite
def conversations(draw, text=TEXT, roles=("user", "tool"), kinds=("text", "reasoning", "tool_calls")):
    messages = []
    if draw(st.booleans()):
        messages.append({"role": "system", "content": [block("text", draw(text))], "loss_weight": 0.0})
    for _ in range(draw(st.integers(1, 4))):
        messages.append(
            {"role": draw(st.sampled_from(roles)), "content": [block("text", draw(text))], "loss_weight": 0.0}
        )
        messages.append(draw(assistant(text, kinds)))
    return messages


@SETTINGS
@given(
    messages=conversations(), strategy=st.sampled_from(["chatml", "alpaca"]), train_on=st.sampled_from(["all", "last"])
)
def test_masked_decode_is_the_assistant_renders(trained, messages, strategy, train_on):
    processor = ProcessorFactory.create(
        "sft", trained, strategy=StrategyFactory.create(strategy, trained), train_on=train_on
    )
    batch = processor.process_batch([{"messages": messages}])
    segments = expected_segments(messages, ROLE_TABLES[strategy], train_on)
    if not any(w > 0 for w in weights_of(messages, train_on)):
        assert [e.reason for _, e in batch.errors] == ["nothing_to_train"]
        return
    assert not batch.errors
    seq, mask, weight = (batch.samples[k][0] for k in ("sequence", "loss_mask", "loss_weight"))
    check_sample(trained, seq, mask, weight, *split_text(segments))
    check_weights(trained, seq, weight, segments)


@pytest.fixture(scope="module")
def chat_tok(trained, tmp_path_factory):
    tok = tokenizer_with_specials(trained, tmp_path_factory.mktemp("prop"), [])
    tok.set_chat_template(CHATML_PREFIX)
    return tok


def assistant_text(message) -> str:
    return "".join(b["value"] for b in message["content"] if b["type"] == "text")


TEMPLATE_TEXT = st.lists(PLAIN | st.sampled_from(["<tool_call>", "\n\n", " ", "é🙂", "{{x}}"]), max_size=3).map("".join)


@SETTINGS
@given(
    messages=conversations(TEMPLATE_TEXT, roles=("user",), kinds=("text",)), train_on=st.sampled_from(["all", "last"])
)
def test_template_ids_and_mask(chat_tok, messages, train_on):
    processor = ProcessorFactory.create(
        "sft", chat_tok, strategy=StrategyFactory.create("template", chat_tok), train_on=train_on
    )
    batch = processor.process_batch([{"messages": messages}])
    values = [b["value"] for m in messages for b in m["content"]]
    if any(t in v for t in chat_tok.special_tokens for v in values):  # would become control tokens
        assert [e.reason for _, e in batch.errors] == ["special_token_in_text"]
        return
    if [e.reason for _, e in batch.errors] == ["template_mask"]:
        # only an assistant text that starts with a blank may merge with the template's "\n"
        assert any(m["role"] == "assistant" and assistant_text(m)[:1].isspace() for m in messages)
        return
    if not any(w > 0 for w in weights_of(messages, train_on)):
        assert [e.reason for _, e in batch.errors] == ["nothing_to_train"]
        return
    assert not batch.errors
    seq, mask = batch.samples["sequence"][0], batch.samples["loss_mask"][0]
    plain, tools, _ = plain_messages(messages)
    assert seq.tolist() == chat_tok.apply_chat_template(plain, tools=tools)
    assert chat_tok.decode(seq.tolist()) == chat_tok.apply_chat_template(plain, tokenize=False)
    assert chat_tok.decode(seq[mask].tolist()) == expected_in(messages, "chatml", train_on)
    assert np.array_equal(batch.samples["loss_weight"][0] > 0, mask)
