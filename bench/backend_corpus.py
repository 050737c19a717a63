"""Benchmark text for the encode backends: real code and prose, plus random unicode words.

The random words make almost every pretoken new, which is the worst case for gigatoken's
pretoken cache (it grows with the number of distinct pretokens it has seen).
"""

from __future__ import annotations

import json
import sys
import sysconfig
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

FIXTURES = Path(__file__).resolve().parents[1].parent / "shared" / "fixtures"
DOC_CHARS = 8_000  # stdlib files are cut into documents of about this size

# (first, last) codepoints of the scripts random words are drawn from
SCRIPTS = (
    (0x61, 0x7A),  # latin
    (0xE0, 0x17F),  # latin accents
    (0x3B1, 0x3C9),  # greek
    (0x430, 0x44F),  # cyrillic
    (0x5D0, 0x5EA),  # hebrew
    (0x627, 0x64A),  # arabic
    (0x905, 0x939),  # devanagari
    (0x4E00, 0x9FA5),  # CJK
    (0xAC00, 0xD7A3),  # hangul
    (0x1F600, 0x1F64F),  # emoji
)


def stdlib_documents() -> Iterator[str]:
    """This Python's own .py sources, cut into DOC_CHARS documents."""
    root = Path(sysconfig.get_paths()["stdlib"])
    if not root.is_dir():
        sys.exit(f"no stdlib sources at {root}")
    for path in sorted(root.rglob("*.py")):
        text = path.read_bytes().decode("utf-8", "replace")
        for start in range(0, len(text), DOC_CHARS):
            yield text[start : start + DOC_CHARS]


def fixture_strings() -> list[str]:
    """Every string value of the LLaMA-Factory demo corpora (prose, chat, tool calls)."""
    folder = FIXTURES / "llamafactory"
    out: list[str] = []
    for name in (
        "c4_demo.jsonl",
        "alpaca_en_demo.json",
        "glaive_toolcall_en_demo.json",
        "dpo_en_demo.json",
        "v1_sft_demo.jsonl",
    ):
        path = folder / name
        if not path.exists():
            continue
        text = path.read_text(encoding="utf-8")
        rows = (
            [json.loads(line) for line in text.splitlines() if line.strip()]
            if name.endswith(".jsonl")
            else json.loads(text)
        )
        out.extend(_strings(rows))
    return out


def _strings(value) -> Iterator[str]:
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def random_word_document(rng: np.random.Generator, chars: int) -> str:
    """``chars`` codepoints of random 1-8 letter words, each word in one random script."""
    lengths = rng.integers(1, 9, size=chars // 4 + 1)
    lengths = lengths[: np.searchsorted(np.cumsum(lengths + 1), chars) + 1]
    script = np.asarray(SCRIPTS)[rng.integers(0, len(SCRIPTS), size=lengths.size)]
    lo = np.repeat(script[:, 0], lengths)
    hi = np.repeat(script[:, 1], lengths)
    letters = lo + (rng.random(lo.size) * (hi - lo + 1)).astype(np.int64)
    ends = np.cumsum(lengths)
    codepoints = np.insert(letters, ends, 0x20).astype("<u4")  # a space after every word
    return codepoints.tobytes().decode("utf-32-le")


def batches(total_bytes: int, batch_size: int, random_share: float = 0.4, seed: int = 0) -> Iterator[list[str]]:
    """Batches of ``batch_size`` documents, ~``total_bytes`` UTF-8 bytes in all, cycling the
    stdlib sources and mixing in random-word documents (``random_share`` of the documents)."""
    rng = np.random.default_rng(seed)
    sent = 0
    docs = _cycle(stdlib_documents)
    while sent < total_bytes:
        batch = [
            random_word_document(rng, 3_000) if rng.random() < random_share else next(docs) for _ in range(batch_size)
        ]
        sent += sum(len(t.encode("utf-8")) for t in batch)
        yield batch


def _cycle(make: Callable[[], Iterator[str]]) -> Iterator[str]:
    while True:
        yield from make()
