"""Shared test fixtures: the ../shared fixtures folder, tokenizers, temporary output folders.

Tests that use ../shared/fixtures fail (not skip) in CI when the folder is missing, so a CI run
can never pass by silently testing less.
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"


def fixtures_dir() -> Path:
    if not SHARED_FIXTURES.is_dir():
        message = f"shared fixtures not found at {SHARED_FIXTURES}; clone with ../shared beside the repo"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return SHARED_FIXTURES


@pytest.fixture(scope="session")
def fixtures() -> Path:
    return fixtures_dir()


@pytest.fixture(scope="session")
def llamafactory(fixtures) -> Path:
    return fixtures / "llamafactory"


@pytest.fixture(scope="session")
def gpt2_path(fixtures) -> Path:
    return fixtures / "tokenizers" / "gpt2" / "tokenizer.json"


@pytest.fixture(scope="session")
def gpt2(gpt2_path):
    from pipeline_core import AutoTokenizer

    return AutoTokenizer.from_file(gpt2_path, eos_token="<|endoftext|>")


def load_json_or_jsonl(path: Path) -> list[dict]:
    if path.suffix == ".jsonl":
        return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    return json.loads(path.read_text(encoding="utf-8"))


@pytest.fixture(scope="session")
def trained(llamafactory):
    """A byte-level BPE trained on the fixture texts (vocab 4000): the 'project's own' tokenizer."""
    from pipeline_core import AutoTokenizer

    texts = [r["text"] for r in load_json_or_jsonl(llamafactory / "c4_demo.jsonl")]
    for row in load_json_or_jsonl(llamafactory / "alpaca_en_demo.json"):
        texts += [row["instruction"], row["input"], row["output"]]
    return AutoTokenizer.train(texts, vocab_size=4000)
