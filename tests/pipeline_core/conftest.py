"""Fixtures shared by the pipeline_core tests."""

from __future__ import annotations

import pytest

from pipeline_core import tokenizer_derived, verdicts


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
