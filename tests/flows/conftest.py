import pytest


@pytest.fixture(autouse=True)
def _prefect(prefect_harness):
    """Every flow test talks to the session's Prefect test server."""
