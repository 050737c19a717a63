import pytest


@pytest.fixture(autouse=True)
def _prefect(prefect_harness):
    """Every flow test talks to the session's Prefect test server."""


@pytest.fixture()
def c4_chunks(tmp_path, llamafactory):
    """The c4 demo split into three JSONL chunks (100 rows each) under ``tmp_path/in``."""
    from tests.conftest import load_json_or_jsonl
    from tests.flows.test_cache_flow import write_chunks

    return write_chunks(tmp_path / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 3)
