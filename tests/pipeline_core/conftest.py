"""Fixtures shared by the pipeline_core tests."""

from __future__ import annotations

import pytest

from pipeline_core import verdicts


@pytest.fixture
def fresh_verdicts(monkeypatch, tmp_path):
    """No verdict recorded by earlier tests (in memory or on disk): the probe check runs for real.

    Yields the folder this test's records go to.
    """
    monkeypatch.setenv("H5PIPE_CACHE_DIR", str(tmp_path / "cache"))
    verdicts.forget_all_in_memory()
    yield tmp_path / "cache" / "backend-verdicts"
    verdicts.forget_all_in_memory()
