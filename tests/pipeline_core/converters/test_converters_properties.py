"""Property tests: converters never lose, reorder or alter a turn's text."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.converters import ConverterFactory

SHAREGPT_ROLES = {"human": "user", "gpt": "assistant", "system": "system", "observation": "tool"}

# Small sizes and example counts keep the suite at a few seconds; unicode stays arbitrary.
fast = settings(max_examples=40, deadline=None)
texts = st.text(max_size=12)
words = texts.map(lambda s: "w" + s)  # has non-space text, so converters must not reject it
no_placeholders = st.text(max_size=8).filter(lambda s: "<" not in s)


def turns_of(element):
    return st.lists(element, min_size=1, max_size=5)


def flat(messages: list[dict]) -> list[tuple[str, str, str]]:
    return [(m["role"], b["type"], b["value"]) for m in messages for b in m["content"]]


def convert(name: str, row: dict, **options) -> dict:
    return ConverterFactory.create(name, **options)(row)


# --- sharegpt -------------------------------------------------------------------------------------

tool_calls = st.builds(lambda name, arg: json.dumps({"name": name, "arguments": {"x": arg}}), texts, texts)
sharegpt_turn = st.one_of(
    st.tuples(st.sampled_from(sorted(SHAREGPT_ROLES)), texts),
    st.tuples(st.just("function_call"), tool_calls),
)


@fast
@given(turns_of(sharegpt_turn), st.one_of(st.none(), words))
def test_sharegpt_keeps_every_turn_in_order(turns, system):
    row = {"conversations": [{"from": f, "value": v} for f, v in turns], "system": system}
    leading_system_turn = bool(turns) and turns[0][0] == "system"  # LLaMA-Factory then reads no column
    expected = [("system", "text", system)] if system and not leading_system_turn else []
    for tag, value in turns:
        if tag == "function_call":
            expected.append(("assistant", "tool_calls", value))
        else:
            expected.append((SHAREGPT_ROLES[tag], "text", value))
    assert flat(convert("sharegpt", row)["messages"]) == expected


@fast
@given(turns_of(st.tuples(st.sampled_from(["user", "assistant"]), texts)))
def test_sharegpt_with_remapped_tags_matches_default_tags(turns):
    tags = {
        "role_tag": "role",
        "content_tag": "content",
        "user_tag": "user",
        "assistant_tag": "assistant",
    }
    remapped = {"msgs": [{"role": r, "content": c} for r, c in turns]}
    default = {"conversations": [{"from": {"user": "human", "assistant": "gpt"}[r], "value": c} for r, c in turns]}
    assert convert("sharegpt", remapped, columns={"messages": "msgs"}, tags=tags) == convert("sharegpt", default)


# --- alpaca ---------------------------------------------------------------------------------------


@fast
@given(words, texts, words, st.lists(st.tuples(texts, texts), max_size=3), st.one_of(st.none(), words))
def test_alpaca_keeps_every_text_in_order(instruction, query, output, history, system):
    row = {
        "instruction": instruction,
        "input": query,
        "output": output,
        "history": [list(pair) for pair in history],
        "system": system,
    }
    expected = [("system", "text", system)] if system else []
    for q, a in history:
        expected += [("user", "text", q), ("assistant", "text", a)]
    user = f"{instruction}\n{query}" if query else instruction
    expected += [("user", "text", user), ("assistant", "text", output)]
    assert flat(convert("alpaca", row)["messages"]) == expected


# --- openai and v1 messages -----------------------------------------------------------------------

openai_turns = turns_of(st.tuples(st.sampled_from(["system", "user", "assistant", "tool"]), texts))


@fast
@given(openai_turns)
def test_openai_keeps_every_turn_in_order(turns):
    row = {"messages": [{"role": r, "content": c} for r, c in turns]}
    assert flat(convert("openai", row)["messages"]) == [(r, "text", c) for r, c in turns]


@fast
@given(openai_turns)
def test_messages_is_idempotent_on_converted_output(turns):
    sample = convert("openai", {"messages": [{"role": r, "content": c} for r, c in turns]})
    assert convert("messages", sample) == sample
    assert convert("messages", convert("messages", sample)) == sample


names = st.one_of(st.none(), texts)


@st.composite
def openai_turns_with_fields(draw):
    """OpenAI turns with an optional name on any turn and an optional tool_call_id on tool turns."""
    turns = []
    for role, content in draw(openai_turns):
        turn = {"role": role, "content": content, "name": draw(names)}
        if role == "tool":
            turn["tool_call_id"] = draw(names)
        turns.append(turn)
    return turns


@fast
@given(openai_turns_with_fields())
def test_openai_fields_are_kept_and_read_back_unchanged(turns):
    sample = convert("openai", {"messages": turns})
    given_fields = [{k: v for k, v in t.items() if k in ("name", "tool_call_id") and v is not None} for t in turns]
    assert [{k: m[k] for k in ("name", "tool_call_id") if k in m} for m in sample["messages"]] == given_fields
    assert convert("messages", json.loads(json.dumps(sample))) == sample


# --- media ----------------------------------------------------------------------------------------


@fast
@given(turns_of(turns_of(st.one_of(no_placeholders, st.just("<image>")))))
def test_media_references_follow_placeholders_and_text_survives(pieces_per_turn):
    turns = ["".join(pieces) for pieces in pieces_per_turn]
    count = sum(turn.count("<image>") for turn in turns)
    images = [f"img/{i}.png" for i in range(count)]
    row = {"conversations": [{"from": "human", "value": t} for t in turns], "images": images}
    messages = convert("sharegpt", row)["messages"]
    assert [v for _, k, v in flat(messages) if k == "image_url"] == images
    kept = ["".join(b["value"] for b in m["content"] if b["type"] == "text") for m in messages]
    assert kept == [turn.replace("<image>", "") for turn in turns]


# --- pair -----------------------------------------------------------------------------------------


@fast
@given(turns_of(st.tuples(st.sampled_from(["human", "gpt"]), texts)), texts, texts)
def test_pair_sides_share_the_prompt(turns, chosen, rejected):
    row = {
        "conversations": [{"from": f, "value": v} for f, v in turns],
        "chosen": {"from": "gpt", "value": chosen},
        "rejected": {"from": "gpt", "value": rejected},
    }
    sample = convert("pair", row)
    prompt = [(SHAREGPT_ROLES[f], "text", v) for f, v in turns]
    assert flat(sample["chosen_messages"]) == [*prompt, ("assistant", "text", chosen)]
    assert flat(sample["rejected_messages"]) == [*prompt, ("assistant", "text", rejected)]
