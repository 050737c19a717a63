"""Guarded frames (chat/frames.py, tokenizer/template_reads.py) on Qwen3's template, against transformers.

Qwen3's template asks each content questions (``startswith('<tool_response>')`` of the last user
turn, ``'</think>' in`` of an assistant turn). Its frames carry them as guards: a row answering them
as the sentinels did is filled into the frame, any other row is rendered by Jinja (counted
``guard_miss``). Its ``content.lstrip('\\n')`` is a derived slot (test_frame_derived.py), no guard.
Both must give transformers' ids and masks. The tokenizer marks
``<think>``, ``<tool_response>``... as added tokens that are not special, as Qwen3's own does, so
rows may hold them as text.
"""

from __future__ import annotations

import json
from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core import AutoTokenizer, ProcessorFactory, StrategyFactory
from pipeline_core.chat.frames import ShapeFrame
from pipeline_core.converters import ConverterFactory
from pipeline_core.processors import fast_template
from tests.pipeline_core.chat.families import family_folder, reference
from tests.pipeline_core.chat.test_frames import v1_row
from tests.pipeline_core.chat.test_real_templates import Reference, check_rows
from tests.pipeline_core.processors.test_fast_pairs import assert_same

FRAGMENTS = ["\n", "\n\n", "</think>", "<think>", "<tool_response>", "</tool_response>", " ", "x", "é"]
PIECE = st.one_of(st.sampled_from(FRAGMENTS), st.text(st.characters(blacklist_categories=("Cs",)), max_size=6))
QWEN3_TEXT = st.lists(PIECE, max_size=5).map("".join)
THINKING = [None, {"enable_thinking": True}, {"enable_thinking": False}]
ROWS = [  # (system, user, assistant)
    (None, "What is 2+2?", "4"),
    (None, "hi", "<think>\nadd them\n</think>\n\n4"),  # </think>: a guard miss
    (None, "hi", "\n\nleading newlines"),  # lstrip('\n') is a derived slot: filled, no miss
    (None, "<tool_response>\n21\n</tool_response>", "It is 21."),  # a user turn that is a tool response: a miss
    (None, "<tool_response> only opened", "ok"),  # starts so, does not end so: a miss (startswith differs)
    ("Be brief.", "q", "a <think> alone"),  # <think> without </think>: no guard asks it
    (None, "q\n", "trailing\n"),
]
MISSES = 3


@pytest.fixture(scope="module")
def folder(tmp_path_factory):
    """Qwen3's tokens and template; its tags (``<think>``, ``<tool_call>``...) added but not special."""
    folder = family_folder("qwen3", tmp_path_factory.mktemp("qwen3"))
    spec = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))
    for token in spec["added_tokens"]:
        token["special"] = token["content"].startswith("<|")
    (folder / "tokenizer.json").write_text(json.dumps(spec), encoding="utf-8")
    return folder


def expected_miss(system, user: str, assistant: str) -> bool:
    """What Qwen3's guards say of a single-turn row (a sentinel answers False to each)."""
    return user.startswith("<tool_response>") or "</think>" in assistant


@pytest.mark.parametrize("kwargs", THINKING)
def test_qwen3_single_turn_rows_use_guarded_frames_and_match_transformers(folder, kwargs):
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    rows = [v1_row(system, [(user, assistant)]) for system, user, assistant in ROWS]
    stats: dict = {}
    options = {"chat_template_kwargs": kwargs} if kwargs else {}
    reasons = check_rows(tok, ref, rows, ConverterFactory.create("messages"), stats, **options)
    assert reasons["ok"] >= len(ROWS) - 2, reasons  # enable_thinking=False: a row that reasons has no exact mask
    assert sum(expected_miss(*row) for row in ROWS) == MISSES
    assert (stats["frame"], stats["jinja"], stats["guard_miss"]) == (len(ROWS) - MISSES, MISSES, MISSES), stats


def check_flat(folder, pairs, **kwargs) -> dict:
    """Flat rows through the batch path (template_pairs.py): every row's ids and mask are transformers',
    and the batch is the general path's."""
    tok = AutoTokenizer.from_file(folder)
    processor = ProcessorFactory.create("sft", tok, strategy=StrategyFactory.create("template", tok, **kwargs))
    rows = [{"query": q, "response": r} for q, r in pairs]
    batch = fast_template.sft_batch(processor, rows)
    assert batch is not None
    ref, errors, kept = reference(folder), dict(batch.errors), iter(range(batch.n_samples))
    for i, (query, response) in enumerate(pairs):
        expect = Reference(ref, v1_row(None, [(query, response)])["messages"], **kwargs.get("chat_template_kwargs", {}))
        if i in errors:
            assert errors[i].reason == "template_mask" and expect.no_exact_answer(), errors[i].message
            continue
        j = next(kept)
        ids, mask, _ = expect.expected()
        assert batch.samples["sequence"][j].tolist() == ids, f"row {i}: ids differ from apply_chat_template"
        assert batch.samples["loss_mask"][j].tolist() == mask.tolist(), f"row {i}: mask differs"
    stats = processor.strategy.fast_path_stats
    assert_same(batch, processor._general_batch(rows))
    return stats


@pytest.mark.parametrize("kwargs", THINKING)
def test_qwen3_flat_rows_take_the_batch_path_with_guards(folder, kwargs):
    pairs = [(user, assistant) for system, user, assistant in ROWS if system is None]
    options = {"chat_template_kwargs": kwargs} if kwargs else {}
    stats = check_flat(folder, pairs, **options)
    assert (stats["frame"], stats["guard_miss"], stats["jinja"]) == (len(pairs) - MISSES, MISSES, MISSES), stats
    assert stats["offsets"] == 0 and stats["segments"] >= len(pairs) - 2, stats


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
@given(rows=st.lists(st.tuples(st.none() | QWEN3_TEXT, QWEN3_TEXT, QWEN3_TEXT), min_size=1, max_size=5))
def test_generated_qwen3_rows_match_transformers(folder, rows):
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    rows = [r for r in rows if "<|" not in "".join(filter(None, r))]
    stats: dict = {}
    check_rows(tok, ref, [v1_row(s, [(u, a)]) for s, u, a in rows], ConverterFactory.create("messages"), stats)
    shaped = [r for r in rows if not any(t is not None and t.isspace() for t in r)]  # a blank content: no shape
    missed = sum(expected_miss(*r) for r in shaped)
    assert stats["guard_miss"] == missed, stats
    assert stats["frame"] == len(shaped) - missed, stats


def test_a_skipped_guard_is_caught(folder, monkeypatch):
    """With guard evaluation disabled, rows that miss a guard are filled wrongly: the checks fail."""
    monkeypatch.setattr(ShapeFrame, "admits", lambda self, contents: True)
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    convert = ConverterFactory.create("messages")
    for _, user, assistant in [r for r in ROWS if expected_miss(*r)][:2]:  # the third renders as the sentinel's
        with pytest.raises(AssertionError, match="differ"):
            check_rows(tok, ref, [v1_row(None, [(user, assistant)])], convert)
        with pytest.raises(AssertionError, match="differ"):
            check_flat(folder, [(user, assistant)])
    assert Counter(check_rows(tok, ref, [v1_row(None, [("q", "a")])], convert)) == {"ok": 1}
