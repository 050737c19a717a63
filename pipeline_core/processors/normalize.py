"""TextNormalizer: optional character replacements applied to text before tokenizing.

The defaults only fold typographic variants onto their ASCII forms (quotes, dashes, ellipsis,
full-width ASCII punctuation and the ideographic space). Full-width CJK punctuation such as
``。`` or ``、`` is left alone: it carries meaning in CJK text and has no exact ASCII twin.
"""

from __future__ import annotations

from collections.abc import Mapping


class Replacements(dict):
    """The default replacement table, ``{character: replacement}``: typographic quotes, dashes,
    ellipsis, no-break and ideographic spaces and full-width ASCII punctuation, each folded onto its
    ASCII form. ``TextNormalizer(use_defaults=True)`` applies it; full-width CJK punctuation is left
    alone (see the module docstring).
    """


DEFAULT_REPLACEMENTS: dict[str, str] = Replacements(
    {
        "\u2018": "'",  # left single quote
        "\u2019": "'",  # right single quote
        "\u201a": "'",  # single low-9 quote
        "\u201b": "'",
        "\u201c": '"',  # left double quote
        "\u201d": '"',  # right double quote
        "\u201e": '"',  # double low-9 quote
        "\u201f": '"',
        "\u2032": "'",  # prime
        "\u2033": '"',  # double prime
        "\u2013": "-",  # en dash
        "\u2014": "-",  # em dash
        "\u2212": "-",  # minus sign
        "\u2026": "...",  # ellipsis
        "\u00a0": " ",  # no-break space
        "\u3000": " ",  # ideographic space
        "\uff01": "!",
        "\uff08": "(",
        "\uff09": ")",
        "\uff0c": ",",
        "\uff1a": ":",
        "\uff1b": ";",
        "\uff1f": "?",
    }
)


class TextNormalizer:
    """Replace characters (or short strings) by a fixed table; ``custom_rules`` extend or override it."""

    def __init__(self, custom_rules: Mapping[str, str] | None = None, use_defaults: bool = True) -> None:
        rules = dict(DEFAULT_REPLACEMENTS) if use_defaults else {}
        rules.update(custom_rules or {})
        if "" in rules:
            raise ValueError("TextNormalizer: an empty string cannot be replaced; remove the '' rule")
        self.rules = rules
        single = {k: v for k, v in rules.items() if len(k) == 1}
        self._table = str.maketrans(single)
        self._multi = sorted(((k, v) for k, v in rules.items() if len(k) > 1), key=lambda kv: -len(kv[0]))

    def __call__(self, text: str) -> str:
        for old, new in self._multi:
            text = text.replace(old, new)
        return text.translate(self._table)

    def describe(self) -> dict[str, str]:
        return dict(sorted(self.rules.items()))
