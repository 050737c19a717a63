"""Probe texts and a checker that two encode backends agree on them, id for id.

A fast backend is only used when it reproduces the reference backend on texts chosen to hit the
places where tokenizer implementations drift apart: whitespace runs, newlines and tabs, scripts
without spaces, multi-codepoint emoji, combining marks, right-to-left text, replacement
characters left by invalid surrogates, digits, very long words, the empty string, one document
long enough to be split across threads, and every added-token string of the tokenizer itself
(alone, glued to words, repeated), since those must encode as plain text.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

import orjson

if TYPE_CHECKING:
    from pipeline_core.tokenizer.protocol import EncodeBackend

_LONE_SURROGATE = "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace")

BUILTIN_PROBES: tuple[str, ...] = (
    "",
    "Hello, world! The quick brown fox jumps over the lazy dog.",
    "don't I'll we've THEY'RE it's  'quoted'  ''",
    "def f(x):\n    return {'a': [x ** 2, x // 3]}  # comment\n\n\nclass A:\n\tpass\n",
    'int main(void) { for (int i = 0; i < 10; ++i) printf("%d\\n", i); return 0; }',
    " " * 64 + "x" + " " * 33 + "y   \n\n\n    z" + " " * 7,
    "a\tb\t\tc\n\nd\r\ne\x0bf\x0cg\u2028h\u00a0i\u3000j",
    "\n" * 12 + "\t" * 9 + " \n \n",
    "日本語のテキストと中文文本，还有한국어 텍스트。カタカナｶﾀｶﾅ",
    "👨\u200d👩\u200d👧\u200d👦 family 👍🏽 thumbs 🏳️\u200d🌈 flag 🇫🇷🇯🇵 👩🏾\u200d💻",
    "cafe\u0301 n\u0303 Z\u0324\u0354\u0367\u0311a\u0316\u0308l\u036e\u0312o\u030c e\u0301\u0301\u0301",
    "مرحبا بالعالم שלום עולם \u202eevil\u202c ١٢٣",
    f"a{_LONE_SURROGATE}b {_LONE_SURROGATE}{_LONE_SURROGATE} \ufffd",
    "3.14159 1,000,000 12345678901234567890 0x1F -42 1e-10 ٣٤ ⅷ ½",
    "a" * 1000,
    "supercalifragilistic" * 60,
    "Ab1+/" * 400,
    "¿Qué? ¡Sí! «quotes» „these“ — em-dash … ellipsis ‰ № ™",
    "\x00\x01\x7f \u200b\ufeff\u200c\u200d zero-width",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝕞𝕒𝕥𝕙 \U0010fffd \U000e0041",
)

# One long document of the short probes back to back. Words longer than ~256 chars are left out
# of it: `tokenizers` does not cache those, so repeating them would make the check take seconds.
_LONG_DOCUMENT_CHARS = 100_000
_LONG_DOCUMENT_MAX_PIECE = 256


@dataclass(frozen=True, slots=True)
class Mismatch:
    """The first probe text on which a candidate backend disagrees with the reference."""

    index: int
    text: str
    expected: list[int]
    got: list[int]

    @property
    def first_difference(self) -> int:
        pairs = zip(self.expected, self.got)
        return next((i for i, (a, b) in enumerate(pairs) if a != b), min(len(self.expected), len(self.got)))

    def describe(self, limit: int = 80) -> str:
        k = self.first_difference
        return (
            f"text {preview(self.text, limit)} (probe #{self.index}, {len(self.text)} chars): "
            f"ids differ at token {k}: reference {self.expected[k : k + 5]} vs candidate {self.got[k : k + 5]}"
        )


def preview(text: str, limit: int = 80) -> str:
    """repr(text), cut to ``limit`` characters with a marker when longer."""
    shown = repr(text)
    return shown if len(shown) <= limit else shown[: limit - 4] + "...'"


def added_token_strings(tokenizer_json: str) -> list[str]:
    """Contents of every added token (special or not) of a serialised tokenizer."""
    added = orjson.loads(tokenizer_json).get("added_tokens") or []
    return [str(t["content"]) for t in added]


def token_probes(token: str) -> list[str]:
    """Texts that hold ``token`` the ways user data may: alone, inside words, spaced, repeated."""
    return [token, f"x{token}y", f" {token} ", f"{token}{token}", f"\n{token}\n", f"Hello{token}world.", token[:-1]]


def overlap_probes(tokens: list[str]) -> list[str]:
    """Texts where one added token runs into another (``<|im_start|>`` then ``|>assistant``):
    `tokenizers` lets the first match hide the second, even a special one it encodes as text; a
    backend that matches otherwise gives other ids only there, on no other probe."""
    starts: dict[str, list[str]] = {}
    for token in tokens:
        for k in range(1, len(token)):
            starts.setdefault(token[:k], []).append(token)
    probes = []
    for token in tokens:
        for k in range(1, len(token)):
            for other in starts.get(token[-k:], ()):
                probes.append(f"{token}{other[k:]}x")
    return list(dict.fromkeys(probes))


def probe_texts(tokenizer_json: str) -> list[str]:
    """The full probe set for one tokenizer: built-ins, its added tokens, one long document."""
    probes = list(BUILTIN_PROBES)
    tokens = added_token_strings(tokenizer_json)
    for token in tokens:
        probes.extend(token_probes(token))
    probes.extend(overlap_probes(tokens))
    probes.append(_long_document(probes))
    return probes


@cache
def probe_set_version() -> str:
    """A digest of everything probe_texts adds besides the tokenizer's own tokens (verdicts.py keys on it)."""
    parts = [*BUILTIN_PROBES, *token_probes("<T>"), str(_LONG_DOCUMENT_CHARS), str(_LONG_DOCUMENT_MAX_PIECE)]
    parts += overlap_probes(["<A|", "|B>"])  # since 2026-12-07: tokens running into each other
    return hashlib.sha256("\x00".join(parts).encode("utf-8", "surrogatepass")).hexdigest()


def _long_document(probes: list[str]) -> str:
    block = "\n".join(p for p in probes if len(p) <= _LONG_DOCUMENT_MAX_PIECE) + "\n"
    return (block * (_LONG_DOCUMENT_CHARS // max(len(block), 1) + 1))[:_LONG_DOCUMENT_CHARS]


def verify_backend(candidate: EncodeBackend, reference: EncodeBackend, probes: list[str]) -> Mismatch | None:
    """Encode ``probes`` as one batch with both backends; the first text whose ids differ, or None."""
    expected = reference.encode_batch(probes)
    got = candidate.encode_batch(probes)
    if len(got) != len(probes):
        raise ValueError(f"backend {candidate.name!r} returned {len(got)} rows for {len(probes)} texts")
    for i, text in enumerate(probes):
        if not _same_ids(expected[i], got[i]):
            return Mismatch(i, text, expected[i].tolist(), got[i].tolist())
    return None


def _same_ids(a, b) -> bool:
    return a.shape == b.shape and bool((a == b).all())
