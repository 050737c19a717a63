"""The shared fixture texts the backend tests encode, and how they compare encodings."""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np
import pytest

from pipeline_core.formats.ragged import Ragged

FIXTURES = Path(__file__).resolve().parents[3].parent / "shared" / "fixtures"
GPT2 = FIXTURES / "tokenizers" / "gpt2" / "tokenizer.json"
CORPORA = {
    "c4_demo.jsonl": "jsonl",
    "alpaca_en_demo.json": "json",
    "glaive_toolcall_en_demo.json": "json",
    "dpo_en_demo.json": "json",
    "v1_sft_demo.jsonl": "jsonl",
}


def require_fixtures() -> None:
    if GPT2.exists() and all((FIXTURES / "llamafactory" / name).exists() for name in CORPORA):
        return
    message = f"shared fixtures missing under {FIXTURES}"
    if os.environ.get("CI") == "true":
        pytest.fail(message)
    pytest.skip(message)


def string_values(value) -> list[str]:
    if isinstance(value, str):
        return [value]
    children = value.values() if isinstance(value, dict) else value if isinstance(value, list) else []
    return [s for child in children for s in string_values(child)]


def corpus_strings(name: str) -> list[str]:
    text = (FIXTURES / "llamafactory" / name).read_text(encoding="utf-8")
    rows = (
        [json.loads(line) for line in text.splitlines() if line.strip()]
        if CORPORA[name] == "jsonl"
        else json.loads(text)
    )
    return string_values(rows)


def assert_same(a: Ragged, b: Ragged) -> None:
    np.testing.assert_array_equal(a.offsets, b.offsets)
    np.testing.assert_array_equal(a.values, b.values)
