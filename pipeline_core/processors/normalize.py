"""TextNormalizer: optional character replacements applied to text before tokenizing.

The defaults only fold typographic variants onto their ASCII forms (quotes, dashes, ellipsis,
full-width ASCII punctuation and the ideographic space). Full-width CJK punctuation such as
``。`` or ``、`` is left alone: it carries meaning in CJK text and has no exact ASCII twin.
"""

from __future__ import annotations

import re
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
    """Replace characters (or short strings) by a fixed table; ``custom_rules`` extend or override it.

    One pass over the text: at each position the longest rule that matches is applied, and what it
    writes is not looked at again (``{"...": "…"}`` stays ``…`` though the defaults fold ``…`` to
    ``...``; ``{"ab": "c", "cd": "X"}`` turns ``abd`` into ``cd``).
    """

    def __init__(self, custom_rules: Mapping[str, str] | None = None, use_defaults: bool = True) -> None:
        rules = dict(DEFAULT_REPLACEMENTS) if use_defaults else {}
        rules.update(custom_rules or {})
        if "" in rules:
            raise ValueError("TextNormalizer: an empty string cannot be replaced; remove the '' rule")
        self.rules = rules
        # how custom rules apply, since 2026-12-07 (they chained, and a text they emptied was written):
        # in the processors' describe(), so outputs made with custom rules before get other cache keys
        self.rule_note = "one_pass_longest_first,emptied_text_skipped" if custom_rules else None
        self._table = str.maketrans(rules) if all(len(k) == 1 for k in rules) else None
        longest_first = sorted(rules, key=len, reverse=True)
        self._pattern = re.compile("|".join(map(re.escape, longest_first))) if rules else None

    def __call__(self, text: str) -> str:
        if self._table is not None:  # single characters only: one translate is the same one pass
            return text.translate(self._table)
        return self._pattern.sub(lambda m: self.rules[m.group(0)], text) if self._pattern else text

    def describe(self) -> dict[str, str]:
        return dict(sorted(self.rules.items()))
