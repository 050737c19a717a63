"""Derived slots (chat/frames.py, tokenizer/template_reads.py ``Derivation``) on Qwen3's template.

Qwen3 writes ``content.lstrip('\\n')`` for the last assistant turn. That is a derived slot: the frame
holds a sentinel standing for it, and each row's slot is the real ``str.lstrip('\\n')`` of its
response, so a response starting with newlines is filled, not rendered by Jinja. The expectations
are transformers' (``apply_chat_template`` text, ids, and the prefix renders' lengths as span edges),
with ``enable_thinking`` unset, true and false; the tokenizer is test_frame_guards.py's (Qwen3's
tags are added tokens that are not special).
"""

from __future__ import annotations

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core import AutoTokenizer
from pipeline_core.chat.frames import compile_frame
from pipeline_core.chat.template_pairs import PAIR
from pipeline_core.converters import ConverterFactory
from pipeline_core.tokenizer.template_reads import Derivation
from tests.pipeline_core.chat.families import reference, template_text
from tests.pipeline_core.chat.test_frame_guards import QWEN3_TEXT, THINKING, check_flat, expected_miss, folder  # noqa: F401
from tests.pipeline_core.chat.test_frames import v1_row
from tests.pipeline_core.chat.test_real_templates import check_rows

EDGES = ["", "\n", "\n\n", " \n", "\n ", "\t\n", "\n\n\n"]
BODIES = ["answer", "<think> alone", "a\n<think>\nb", "x <tool_call>", "é\n\nz"]
EDGED = [(f"{a}q{b}", f"{a}{body}{b}") for a in EDGES for b in EDGES[:4] for body in BODIES[:1]] + [
    (f"{a}q", f"{a}{body}") for a in EDGES[1:4] for body in BODIES[1:]
]  # no '</think>': every one is the frame's
EDGE = st.sampled_from(EDGES)
CONTENT = st.builds(lambda a, t, b: a + t + b, EDGE, QWEN3_TEXT, EDGE)


def options(kwargs) -> dict:
    return {"chat_template_kwargs": kwargs} if kwargs else {}


@pytest.fixture(scope="module")
def qwen3_ref(folder):  # noqa: F811 - the imported fixture
    return reference(folder)


def test_qwen3_lstrip_is_a_derived_slot_not_a_guard():
    frame = compile_frame(template_text("qwen3"), PAIR, {})
    assert frame.derived == (Derivation(1, "lstrip", ("\n",)),)
    assert {g.op for g in frame.guards} == {"startswith", "in"}  # '<tool_response>' of the query, '</think>' in
    assert frame.whole.slots == (0, 2)  # the query, then the response lstripped


@pytest.mark.parametrize("kwargs", THINKING)
@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(query=CONTENT, response=CONTENT)
def test_filled_text_and_span_edges_are_transformers_renders(qwen3_ref, kwargs, query, response):
    """The frame's text is apply_chat_template's, its span the prefix renders' lengths (a pure text check)."""
    frame = compile_frame(template_text("qwen3"), PAIR, kwargs or {})
    if not query.strip() or not response.strip():
        return  # a blank content is another shape
    messages = [{"role": "user", "content": query}, {"role": "assistant", "content": response}]
    filled = frame.render([query, response])
    if filled is None:
        assert expected_miss(None, query, response)
        return
    render = qwen3_ref.apply_chat_template
    whole = render(messages, tokenize=False, **(kwargs or {}))
    before = render(messages[:1], tokenize=False, add_generation_prompt=True, **(kwargs or {}))
    assert filled == (whole, [(len(before), len(whole), 1)])


@pytest.mark.parametrize("kwargs", THINKING)
def test_rows_with_edge_newlines_are_filled_and_match_transformers(folder, qwen3_ref, kwargs):  # noqa: F811
    tok, stats = AutoTokenizer.from_file(folder), {}
    rows = [v1_row(None, [pair]) for pair in EDGED]
    reasons = check_rows(tok, qwen3_ref, rows, ConverterFactory.create("messages"), stats, **options(kwargs))
    assert reasons["ok"] >= len(rows) * 3 // 4, reasons  # ' \n' after '</think>\n\n': a token may straddle
    assert (stats["frame"], stats["jinja"], stats["guard_miss"]) == (len(rows), 0, 0), stats


@pytest.mark.parametrize("kwargs", THINKING)
def test_flat_rows_with_leading_newlines_take_the_frame_in_the_batch_path(folder, kwargs):  # noqa: F811
    pairs = [("q", "\nanswer"), ("q\n", "\n\nanswer\n"), ("\nq", "\n\n\n<think> x"), ("q", "plain")]
    stats = check_flat(folder, pairs, **options(kwargs))
    assert (stats["frame"], stats["jinja"], stats["guard_miss"]) == (len(pairs), 0, 0), stats


@settings(max_examples=30, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(pairs=st.lists(st.tuples(CONTENT, CONTENT), min_size=1, max_size=4), kwargs=st.sampled_from(THINKING))
def test_generated_edge_rows_match_transformers(folder, qwen3_ref, pairs, kwargs):  # noqa: F811
    tok, stats = AutoTokenizer.from_file(folder), {}
    pairs = [p for p in pairs if "<|" not in "".join(p)]
    check_rows(
        tok,
        qwen3_ref,
        [v1_row(None, [p]) for p in pairs],
        ConverterFactory.create("messages"),
        stats,
        **options(kwargs),
    )
    shaped = [p for p in pairs if not (p[0].isspace() or p[1].isspace())]  # a blank content: no shape
    missed = sum(expected_miss(None, *p) for p in shaped)
    assert (stats["frame"], stats["guard_miss"]) == (len(shaped) - missed, missed), stats
    flat = [p for p in shaped if p[0] and p[1]]  # the batch path's shape
    if flat:
        check_flat(folder, flat, **options(kwargs))


def test_a_derived_slot_filled_with_the_raw_content_is_caught(folder, qwen3_ref, monkeypatch):  # noqa: F811
    """With each derived slot filled with its parent's raw content, leading-newline rows differ."""
    monkeypatch.setattr(Derivation, "apply", lambda self, contents: contents[self.parent])
    tok, convert = AutoTokenizer.from_file(folder), ConverterFactory.create("messages")
    for pair in [("q", "\nanswer"), ("q", "\n\nanswer\n")]:
        with pytest.raises(AssertionError, match="differ"):
            check_rows(tok, qwen3_ref, [v1_row(None, [pair])], convert)
        with pytest.raises(AssertionError, match="differ"):
            check_flat(folder, [pair])
    assert check_rows(tok, qwen3_ref, [v1_row(None, [("q", "a")])], convert)["ok"] == 1
