"""TextNormalizer applies its rules in one pass, longest match first, never rescanning what a rule wrote.

Before, multi-character rules ran one after another and the single-character table ran over their
output: ``{"...": "…"}`` was undone by the default ``… -> ...``, ``{"--": "—"}`` gave ``-`` and
rules chained (``{"ab": "c", "cd": "X"}`` turned ``abd`` into ``X``). The reference below is a
plain left-to-right scan written for the test.
"""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import TextNormalizer


def one_pass(rules: dict[str, str], text: str) -> str:
    """At each position the longest key that matches is replaced; else the character is kept."""
    out, i = [], 0
    keys = sorted(rules, key=len, reverse=True)
    while i < len(text):
        key = next((k for k in keys if text.startswith(k, i)), None)
        out.append(rules[key] if key is not None else text[i])
        i += len(key) if key is not None else 1
    return "".join(out)


def test_custom_rules_override_and_are_not_undone_by_the_defaults():
    assert TextNormalizer({"...": "\u2026"})("wait...") == "wait\u2026"
    assert TextNormalizer({"--": "\u2014"})("a--b") == "a\u2014b"
    assert TextNormalizer({"ab": "c", "cd": "X"}, use_defaults=False)("abd") == "cd"
    assert TextNormalizer()("\u201cq\u201d \u2014 \u2026") == '"q" - ...'  # the defaults alone, as before


alphabet = st.sampled_from(list("abc.-") + ["\u2026", "\u2014"])
keys = st.text(alphabet, min_size=1, max_size=3)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(keys, st.text(alphabet, max_size=3), max_size=5), st.text(alphabet, max_size=30), st.booleans())
def test_one_pass_longest_first(custom, text, use_defaults):
    normalizer = TextNormalizer(custom, use_defaults=use_defaults)
    assert normalizer(text) == one_pass(normalizer.rules, text)


REMOVE = {"[removed]": ""}


def test_a_text_the_normalizer_empties_is_empty_text_as_an_empty_one_is(trained):
    """The blank check ran before the normalizer: pt wrote an empty sample (packed, the same row was
    skipped as empty_sample), sft an answer of its end token alone. Raw "" is the reference."""
    from pipeline_core import ProcessorFactory

    normalizer = TextNormalizer(REMOVE, use_defaults=False)
    cases = [
        ("pt", {"add_eos": False}, {"text": "[removed]"}, {"text": ""}),
        ("pt", {"text_keys": ["text", "title"]}, {"text": "a", "title": " [removed] "}, {"text": "a", "title": " "}),
        ("sft", {}, {"query": "hi", "response": "[removed]"}, {"query": "hi", "response": ""}),
        ("sft", {"strategy": "alpaca"}, {"query": "[removed]", "response": "ok"}, {"query": "", "response": "ok"}),
        (
            "dpo",
            {},
            {"query": "hi", "chosen": "[removed]", "rejected": "no"},
            {"query": "hi", "chosen": "", "rejected": "no"},
        ),
    ]
    for kind, options, normalized_away, raw_empty in cases:
        with_rules = ProcessorFactory.create(kind, trained, normalizer=normalizer, **options)
        plain = ProcessorFactory.create(kind, trained, **options)
        got = with_rules.process_batch([normalized_away, {**normalized_away, **_kept(kind)}])
        want = plain.process_batch([raw_empty, {**raw_empty, **_kept(kind)}])
        assert [(i, e.reason, e.field) for i, e in got.errors] == [(i, e.reason, e.field) for i, e in want.errors]
        assert [(i, e.reason) for i, e in got.errors] == [(0, "empty_text")], (kind, options)
        assert got.rows.tolist() == want.rows.tolist() == [1]


def _kept(kind: str) -> dict:
    """A second row that stays, so the batch also takes the row-by-row path beside a good row."""
    return {"pt": {"text": "kept", "title": "kept"}, "sft": {"query": "q", "response": "r"}}.get(
        kind, {"query": "q", "chosen": "c", "rejected": "r"}
    )
