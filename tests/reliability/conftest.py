"""Reliability tests: faults injected for real (SIGKILL, damaged files, bad bytes, flaky calls).

Flow tests here run against the session's Prefect test server, so it is used by every test.
"""

from __future__ import annotations

import pytest

from tests.conftest import load_json_or_jsonl


@pytest.fixture(autouse=True)
def _prefect(prefect_harness):
    """Every test may run a flow against the session's Prefect test server."""


@pytest.fixture(scope="session")
def c4_rows(llamafactory) -> list[dict]:
    return load_json_or_jsonl(llamafactory / "c4_demo.jsonl")


@pytest.fixture(scope="session")
def c4_texts(c4_rows) -> list[str]:
    return [r["text"] for r in c4_rows]
