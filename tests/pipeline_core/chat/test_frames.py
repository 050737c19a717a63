"""Frames (chat/frames.py) and segment cuts (tokenizer/segments.py) against transformers.

Generated conversations (random unicode, edge whitespace and newlines, strings that look like
markers, sentinels or Jinja, empty contents) go through the template strategy, whose fast path
must give transformers' ids (``apply_chat_template``) and prefix-render masks on real templates;
templates that read or transform contents, and rows a shape does not fix, must fall back to Jinja
(counted in ``fast_path_stats``) and stay exact.
"""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pipeline_core import AutoTokenizer
from pipeline_core.converters import ConverterFactory
from tests.pipeline_core.chat.families import family_folder, reference
from tests.pipeline_core.chat.test_real_templates import check_rows

EDGES = ["", " ", "\n", "\n\n", "\t", "  \n "]
LOOKALIKES = [
    "<|im_start", "im_end|>", "<think>x</think>", "{{ content }}", "{% if x %}y{% endif %}", "[INST]",
    "<start_of_turn>", "\ue010", "\ue0100 \n\"\\<b>&'é Aa\t \ue011", "\ue011\ue010s0", "assistant\n", "\u00a0",
]  # fmt: skip
TEXT = st.text(st.characters(blacklist_categories=("Cs",)), max_size=24)
CONTENT = st.one_of(
    TEXT,
    st.sampled_from(LOOKALIKES + EDGES),
    st.builds(lambda a, t, b: a + t + b, st.sampled_from(EDGES), TEXT, st.sampled_from(EDGES)),
)


def v1_row(system: str | None, turns: list[tuple[str, str]]) -> dict:
    def message(role: str, text: str) -> dict:
        return {"role": role, "content": [{"type": "text", "value": text}]}

    chat = [message("system", system)] if system is not None else []
    for user, assistant in turns:
        chat += [message("user", user), message("assistant", assistant)]
    return {"messages": chat}


CONVERSATION = st.builds(
    v1_row, st.one_of(st.none(), CONTENT), st.lists(st.tuples(CONTENT, CONTENT), min_size=1, max_size=3)
)


def clean(tok: AutoTokenizer):
    """Rows whose texts hold no special-token string (those are refused before any rendering)."""
    specials = tok.special_tokens

    def ok(row: dict) -> bool:
        texts = [b["value"] for m in row["messages"] for b in m["content"]]
        return not any(s in t for s in specials for t in texts)

    return ok


@pytest.mark.parametrize("family", ["qwen2.5", "llama3.1", "mistral"])
def test_generated_conversations_match_transformers(tmp_path_factory, family):
    folder = family_folder(family, tmp_path_factory.mktemp(family.replace(".", "_")))
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    convert = ConverterFactory.create("messages")
    totals: Counter = Counter()

    @settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture])
    @given(st.lists(CONVERSATION.filter(clean(tok)), min_size=1, max_size=5))
    def run(rows):
        stats: dict = {}
        check_rows(tok, ref, rows, convert, stats)
        totals.update(stats)
        # every row came from a frame but those with a whitespace-only content (a shape does not fix
        # whether it is empty once trimmed), and every sample was cut by segments
        framed = sum(not any(b["value"].isspace() for m in r["messages"] for b in m["content"]) for r in rows)
        assert (stats["frame"], stats["jinja"], stats["offsets"]) == (framed, len(rows) - framed, 0), stats

    run()
    assert totals["frame"] > 20, totals


CHATML = "{{ '<|im_start|>' + m.role + '\n' + %s + '<|im_end|>\n' }}"
READING = {
    "json of content": CHATML % "(m.content | tojson)",
    "length of content": CHATML % "(m.content ~ ('+' if m.content | length > 3 else ''))",
    "trims a concatenation": CHATML % "((m.content ~ '\n') | trim)",
    "escapes content": "{{ '<|im_start|>' + m.role + '\n' }}{{ m.content | e }}{{ '<|im_end|>\n' }}",
    # a string made from a content by a filter, a literal's method or a macro is traced in its turn
    "branches on a joined content": "{% if ([m.content] | join).startswith('!') %}{{ '!!' }}{% endif %}"
    + CHATML % "m.content",
    "branches on a literal's join": "{% if ''.join([m.content]).startswith('!') %}{{ '!!' }}{% endif %}"
    + CHATML % "m.content",
    "branches on a macro's output": "{% macro say(x) %}{{ x }}{% endmacro %}"
    "{% if say(m.content).startswith('!') %}{{ '!!' }}{% endif %}" + CHATML % "m.content",
    "passes content to a literal's method": "{% if '!go'.startswith(m.content) %}{{ '!!' }}{% endif %}"
    + CHATML % "m.content",
    "counts words": CHATML % "(m.content ~ ('+' if m.content | wordcount > 1 else ''))",
    "a chain holding in": "{% if '' < m.content in 'abcd' %}{{ '!!' }}{% endif %}" + CHATML % "m.content",
    # what a guard or a derivation does not cover: a string answer that is not one, another content as operand
    "splits content": CHATML % "m.content.split('o')[0]",
    "changes content by a content": CHATML % "m.content.replace(messages[0].content, '_')",
    "indexes a derived content": CHATML % "(m.content ~ ('+' if m.content.strip('!')[0] == 'o' else ''))",
    "compares two contents": "{% if m.content == messages[0].content %}{{ '=' }}{% endif %}" + CHATML % "m.content",
    "looks for a content in a content": "{% if messages[0].content in m.content %}{{ '=' }}{% endif %}"
    + CHATML % "m.content",
}
# questions asked of a content itself with a literal: guards, the row's content asked again
GUARDED = {
    "branches on content": (
        "{% if m.content.startswith('!') %}{{ '!!' }}{% endif %}" + CHATML % "m.content",
        lambda c: c.startswith("!"),
    ),
    "compares content": (
        "{% if m.content == 'hi' %}{{ 'hi!' }}{% endif %}" + CHATML % "m.content",
        lambda c: c == "hi",
    ),
    "looks for content in a literal": (
        "{% if m.content in '!go hi' %}{{ '!!' }}{% endif %}" + CHATML % "m.content",
        lambda c: c in "!go hi",
    ),
    "content not in a literal": (
        CHATML % "(m.content ~ ('+' if m.content not in 'abcd' else ''))",
        lambda c: c in "abcd",
    ),
}
# string methods with literal arguments: derived contents, computed per row (a blank result: Jinja)
DERIVED = {
    "changes content": (CHATML % "m.content.replace(' ', '_')", lambda c: False),
    "strips a prefix": (CHATML % "m.content.removeprefix('!go')", lambda c: not c.removeprefix("!go").strip()),
    "chains derivations": (
        "{% if m.content.lstrip('!').rstrip().endswith('&') %}{{ '&!' }}{% endif %}"
        + CHATML % "m.content.lstrip('!').rstrip().replace('o', '0')",
        lambda c: not c.lstrip("!").strip() or c.lstrip("!").rstrip().endswith("&"),
    ),
    "trims by filter": (CHATML % "(m.content | trim | replace('h', 'H'))", lambda c: False),
    "tests a derived content": (  # a sentinel is never empty: a row whose derived content is blank misses
        CHATML % "(m.content.removeprefix('!go') or '(none)')",
        lambda c: not c.removeprefix("!go").strip(),
    ),
}
FOOTER = "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"


@pytest.mark.parametrize("name", sorted(READING))
def test_templates_that_read_contents_fall_back_and_stay_exact(tmp_path, name):
    template = "{% for m in messages %}" + READING[name] + "{% endfor %}" + FOOTER
    folder = family_folder("qwen2.5", tmp_path / "t", template=template)
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    rows = [v1_row(None, [(q, a)]) for q, a in [("!go", "ok <b>&"), ("hi", ' "x" \n'), ("abcd", "hi"), ("a", "b")]]
    stats: dict = {}
    reasons = check_rows(tok, ref, rows, ConverterFactory.create("messages"), stats)  # every row checked
    assert reasons["ok"] >= 3, reasons  # "compares content" prefixes an assistant "hi": no exact mask
    assert stats["frame"] == 0 and stats["jinja"] == len(rows), stats


@pytest.mark.parametrize("name", sorted(GUARDED))
def test_templates_that_ask_contents_guard_their_frames_and_stay_exact(tmp_path, name):
    template, asks = GUARDED[name]
    folder = family_folder(
        "qwen2.5", tmp_path / "t", template="{% for m in messages %}" + template + "{% endfor %}" + FOOTER
    )
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    pairs = [("!go", "ok <b>&"), ("hi", ' "x" \n'), ("abcd", "hi"), ("a", "b"), ("q", "r")]
    stats: dict = {}
    reasons = check_rows(tok, ref, [v1_row(None, [p]) for p in pairs], ConverterFactory.create("messages"), stats)
    assert reasons["ok"] >= 4, reasons  # "compares content" prefixes an assistant "hi": no exact mask
    missed = sum(asks(q) or asks(a) for q, a in pairs)  # a sentinel answers False to every question
    assert 0 < missed < len(pairs)
    assert (stats["frame"], stats["jinja"], stats["guard_miss"]) == (len(pairs) - missed, missed, missed), stats


@pytest.mark.parametrize("name", sorted(DERIVED))
def test_templates_that_derive_contents_fill_them_per_row_and_stay_exact(tmp_path, name):
    template, misses = DERIVED[name]
    folder = family_folder(
        "qwen2.5", tmp_path / "t", template="{% for m in messages %}" + template + "{% endfor %}" + FOOTER
    )
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    pairs = [("!go", "ok <b>&"), ("hi", ' "x" \n'), ("!!abcd", "hi &  "), ("a", "b"), ("\nq", "r\n\n")]
    stats: dict = {}
    reasons = check_rows(tok, ref, [v1_row(None, [p]) for p in pairs], ConverterFactory.create("messages"), stats)
    assert reasons["ok"] >= 3, reasons  # "chains derivations" writes '&!' before an assistant turn: no exact mask
    missed = sum(misses(q) or misses(a) for q, a in pairs)
    assert (stats["frame"], stats["jinja"], stats["guard_miss"]) == (len(pairs) - missed, missed, missed), stats


def test_whitespace_only_content_falls_back_counted(tmp_path):
    folder = family_folder("llama3.1", tmp_path / "l")  # its template trims contents
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    rows = [v1_row(None, [("  \n", "answer")]), v1_row(None, [(" q ", " a\n")])]
    stats: dict = {}
    assert check_rows(tok, ref, rows, ConverterFactory.create("messages"), stats)["ok"] == 2
    assert stats["frame"] == 1 and stats["jinja"] == 1, stats
