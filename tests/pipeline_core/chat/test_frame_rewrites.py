"""Frames of templates that rewrite history (chat/frames.py ``rewrites``, chat/template.py ``_samples_of``).

Qwen3 writes an assistant turn after the last user message with ``<think>\\n\\n</think>\\n\\n`` and
the earlier ones without, so in a two-turn conversation the first answer renders differently
alone than inside the whole: the render of ``messages[:2]`` is no prefix of the whole one. Such a
shape's frame ``rewrites``: each row's renders are filled from it (``texts``) and the strategy takes
the same decision on them as on Jinja's renders (``rewritten="last"``: the render through the last
answer, that answer trained; ``"per_turn"``: one sample per answer). Expectations: transformers'
``apply_chat_template`` renders of the same conversations and of their prefixes.
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core import AutoTokenizer, StrategyFactory
from pipeline_core.chat.frames import compile_frame
from pipeline_core.chat.template_pairs import PAIR
from pipeline_core.converters import ConverterFactory
from tests.pipeline_core.chat.families import reference, template_text
from tests.pipeline_core.chat.test_frame_guards import QWEN3_TEXT, THINKING, folder  # noqa: F401
from tests.pipeline_core.chat.test_frames import v1_row
from tests.pipeline_core.chat.test_real_templates import check_rows

TWO_TURNS = (("user", True), ("assistant", True), ("user", True), ("assistant", True))
TURNS = [
    ("What is 2+2?", "4", "And 3+3?", "6"),
    ("hi", "\n\nhello", "again", "\nhello again"),  # Qwen3 lstrips the last answer only
    ("a", "b\n", "c", "d"),
    ("q one", "an answer", "q two", "<think> an open tag"),  # '<think>' alone: no reasoning split
]


def options(kwargs) -> dict:
    return {"chat_template_kwargs": kwargs} if kwargs else {}


def two_turn_row(system, q1, a1, q2, a2) -> dict:
    return v1_row(system, [(q1, a1), (q2, a2)])


@pytest.fixture(scope="module")
def qwen3_ref(folder):  # noqa: F811 - the imported fixture
    return reference(folder)


def test_qwen3_two_turns_rewrite_one_turn_does_not():
    assert compile_frame(template_text("qwen3"), TWO_TURNS, {}).rewrites
    assert not compile_frame(template_text("qwen3"), PAIR, {}).rewrites
    assert not compile_frame(template_text("qwen2.5"), TWO_TURNS, {}).rewrites


@pytest.mark.parametrize("kwargs", THINKING)
@pytest.mark.parametrize("system", [None, "You are terse."])
def test_two_turn_rows_are_filled_and_match_transformers(folder, qwen3_ref, kwargs, system):  # noqa: F811
    tok, stats = AutoTokenizer.from_file(folder), {}
    rows = [two_turn_row(system, *turns) for turns in TURNS]
    reasons = check_rows(tok, qwen3_ref, rows, ConverterFactory.create("messages"), stats, **options(kwargs))
    assert reasons["ok"] == len(rows), reasons
    assert (stats["frame"], stats["jinja"], stats["guard_miss"]) == (len(rows), 0, 0), stats


@pytest.mark.parametrize("kwargs", THINKING)
@settings(max_examples=120, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(contents=st.tuples(QWEN3_TEXT, QWEN3_TEXT, QWEN3_TEXT, QWEN3_TEXT))
def test_filled_renders_are_transformers_renders(qwen3_ref, kwargs, contents):
    """Each render the frame fills (the whole, each answer's prefix renders) is apply_chat_template's text."""
    if not all(c.strip() for c in contents):
        return  # a blank content is another shape
    frame = compile_frame(template_text("qwen3"), TWO_TURNS, kwargs or {})
    texts = frame.texts(list(contents))
    if texts is None:  # a guard missed: Jinja renders the row
        users, answers = contents[::2], contents[1::2]  # what Qwen3 asks of them, in some render
        assert any(c.startswith("<tool_response>") for c in users) or any("</think>" in c for c in answers)
        return
    roles = ("user", "assistant") * 2
    messages = [{"role": r, "content": c} for r, c in zip(roles, contents)]

    def render(chat, prompt=False):
        return qwen3_ref.apply_chat_template(chat, tokenize=False, add_generation_prompt=prompt, **(kwargs or {}))

    whole, turns = texts
    assert whole == render(messages)
    assert turns == [(render(messages[:k], True), render(messages[: k + 1]), k) for k in (1, 3)]


@pytest.mark.parametrize("rewritten", ["last", "per_turn"])
def test_frame_samples_equal_the_jinja_paths(folder, rewritten):  # noqa: F811
    """The same row's samples (texts and spans) with frames and with every row rendered by Jinja."""
    tok = AutoTokenizer.from_file(folder)
    framed = StrategyFactory.create("template", tok, rewritten=rewritten)
    jinja = StrategyFactory.create("template", tok, rewritten=rewritten)
    jinja._framed = set()  # no template has frames: Jinja renders every row
    convert = ConverterFactory.create("messages")
    for turns in TURNS:
        messages = convert(two_turn_row(None, *turns))["messages"]
        assert framed._texts(messages, rewritten == "per_turn") == jinja._texts(messages, rewritten == "per_turn")
    assert framed.fast_path_stats["frame"] == len(TURNS) and jinja.fast_path_stats["frame"] == 0
    samples = framed._texts(convert(two_turn_row(None, *TURNS[0]))["messages"], rewritten == "per_turn")[0]
    assert len(samples) == (2 if rewritten == "per_turn" else 1)
    assert all(len(spans) == 1 for _, spans in samples)  # each sample trains its own answer only
