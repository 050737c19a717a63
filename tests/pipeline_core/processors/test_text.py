import pytest

from pipeline_core import DEFAULT_REPLACEMENTS, TextNormalizer


def test_defaults_fold_typography():
    n = TextNormalizer()
    assert n("\u2018a\u2019 \u201cb\u201d c\u2013d\u2014e\u2026\uff01\uff1f") == "'a' \"b\" c-d-e...!?"
    assert n("中文。、") == "中文。、"  # CJK sentence punctuation is kept


def test_custom_rules_extend_and_override():
    n = TextNormalizer({"\u2014": " -- ", "colour": "color"})
    assert n("colour\u2014red") == "color -- red"
    assert TextNormalizer({"x": "y"}, use_defaults=False)("\u2026x") == "\u2026y"
    assert "\u2026" in DEFAULT_REPLACEMENTS


def test_empty_rule_rejected():
    with pytest.raises(ValueError, match="empty string"):
        TextNormalizer({"": "x"})
