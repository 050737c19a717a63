"""Shared test fixtures: the ../shared fixtures folder, tokenizers, temporary output folders.

Tests that use ../shared/fixtures fail (not skip) in CI when the folder is missing, so a CI run
can never pass by silently testing less.
"""

from __future__ import annotations

import json
import os
import tempfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
SHARED_FIXTURES = ROOT.parent / "shared" / "fixtures"

# Recorded backend verdicts (pipeline_core/tokenizer/verdicts.py) go to a folder of this session, never
# ~/.cache: every test session checks gigatoken against `tokenizers` for itself.
os.environ.setdefault("H5PIPE_CACHE_DIR", tempfile.mkdtemp(prefix="h5pipe-test-cache-"))
# A CLI run in a test subprocess without an API uses Prefect's temporary server, which ends with
# it, never h5pipe's kept server (it would outlive the session by its idle time). The kept server
# is tested on its own, with its own environment (tests/flows/test_local_server.py).
os.environ.setdefault("H5PIPE_SERVER", "temporary")


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


# ---- real services: one Prefect test server and one S3 API (moto) per session -------------------


@pytest.fixture(scope="session")
def prefect_harness():
    """One temporary Prefect server for the whole session (it takes seconds to start)."""
    from prefect.settings import PREFECT_FLOWS_HEARTBEAT_FREQUENCY, temporary_settings
    from prefect.testing.utilities import prefect_test_harness

    # No flow-run heartbeats in this process, as in Prefect's own test profile (PrefectHQ/prefect
    # #21062): at exit the engine joins the heartbeat thread, which sleeps in 1 s steps, so each
    # flow run would last up to a second longer. Ad hoc runs (flows.runs) switch them off the same
    # way; served deployments in subprocesses keep them.
    with (
        prefect_test_harness(server_startup_timeout=120),
        temporary_settings({PREFECT_FLOWS_HEARTBEAT_FREQUENCY: None}),
    ):
        yield


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


S3_ENV = {
    "AWS_ACCESS_KEY_ID": "h5pipe-test-key-id",
    "AWS_SECRET_ACCESS_KEY": "h5pipe-test-secret-value",
    "AWS_DEFAULT_REGION": "us-east-1",
}


@pytest.fixture(scope="session")
def s3_endpoint():
    """A real S3 API on 127.0.0.1 (moto's threaded server); credentials come from the environment."""
    from moto.server import ThreadedMotoServer

    saved = {k: os.environ.get(k) for k in S3_ENV}
    os.environ.update(S3_ENV)
    server = ThreadedMotoServer(ip_address="127.0.0.1", port=free_port(), verbose=False)
    server.start()
    host, port = server.get_host_and_port()
    try:
        yield f"http://{host}:{port}"
    finally:
        server.stop()
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


@pytest.fixture()
def s3_bucket(s3_endpoint, request):
    """A fresh bucket per test; yields (bucket URL, storage_options)."""
    import re
    import uuid

    import s3fs

    name = re.sub(r"[^a-z0-9-]", "-", request.node.name.lower())[:40].strip("-") + "-" + uuid.uuid4().hex[:6]
    options = {"endpoint_url": s3_endpoint}
    fs = s3fs.S3FileSystem(**options)
    fs.mkdir(name)
    yield f"s3://{name}", options
    s3fs.S3FileSystem.clear_instance_cache()


@pytest.fixture()
def hf_offline(monkeypatch, tmp_path_factory):
    """No network for datasets / huggingface_hub, and a private datasets cache."""
    import datasets
    import huggingface_hub.constants

    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_DATASETS_CACHE", str(tmp_path_factory.getbasetemp() / "hf-cache"))
