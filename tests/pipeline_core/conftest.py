"""Fixtures shared by the pipeline_core tests."""

from __future__ import annotations

from pathlib import Path

import pytest

from pipeline_core.tokenizer import derived as tokenizer_derived
from pipeline_core.tokenizer import verdicts
from pipeline_core.tokenizer.auto import AutoTokenizer
from tests.pipeline_core.tokenizer.backend_corpora import GPT2, corpus_strings, require_fixtures


def forget_in_memory() -> None:
    """What a new process sees: nothing recorded in memory, only the records on disk."""
    verdicts.forget_all_in_memory()
    tokenizer_derived.forget_all_in_memory()


@pytest.fixture
def fresh_verdicts(monkeypatch, tmp_path):
    """No verdict or derived value recorded by earlier tests (in memory or on disk): the probe
    check and the JSON parsing run for real.

    Yields the folder this test's verdict records go to.
    """
    monkeypatch.setenv("H5PIPE_CACHE_DIR", str(tmp_path / "cache"))
    forget_in_memory()
    yield tmp_path / "cache" / "backend-verdicts"
    forget_in_memory()


# ---- tokenizers the backend tests compare on ---------------------------------------------
@pytest.fixture(scope="module")
def trained_dir(tmp_path_factory) -> Path:
    require_fixtures()
    folder = tmp_path_factory.mktemp("trained")
    AutoTokenizer.train(corpus_strings("c4_demo.jsonl"), vocab_size=2000).save(folder)
    return folder


@pytest.fixture(scope="module", params=["gpt2", "trained"])
def tokenizer_json(request) -> str:
    require_fixtures()
    if request.param == "gpt2":
        return GPT2.read_text(encoding="utf-8")
    return (request.getfixturevalue("trained_dir") / "tokenizer.json").read_text(encoding="utf-8")
