"""cache_flow writing to S3 through a fault-injecting proxy: retry budget, clean failure, no secrets in logs."""

from __future__ import annotations

import json
import logging

import numpy as np
import pytest
import s3fs

from flows.cache_flow import cache_flow
from flows.params import CacheParams
from pipeline_core.formats.h5 import open_h5
from tests.conftest import S3_ENV
from tests.s3_proxy import FaultProxy


@pytest.fixture()
def proxy(s3_endpoint):
    with FaultProxy(s3_endpoint) as p:
        yield p


def params(llamafactory, gpt2_path, output, endpoint, retries=2):
    storage = {"endpoint_url": endpoint, "max_attempts": 1, "connect_timeout": 2, "read_timeout": 10}
    return CacheParams(
        input=str(llamafactory / "c4_demo.jsonl"),
        output=output,
        tokenizer={"path": str(gpt2_path), "eos_token": "<|endoftext|>"},
        pack_size=256,
        pad_value=0,
        run={"storage": storage, "retries": retries, "retry_delay": 0.05},
    )


def sequences(url, endpoint):
    with open_h5(url, {"endpoint_url": endpoint}) as f:
        return f["sequence"][...]


@pytest.mark.parametrize("kind", ["503", "500", "reset"])
def test_faults_below_the_budget_give_identical_content(kind, s3_bucket, s3_endpoint, proxy, llamafactory, gpt2_path):
    bucket, _ = s3_bucket
    cache_flow(params(llamafactory, gpt2_path, f"{bucket}/clean", s3_endpoint))
    proxy.plan.add("PUT", r"/faulty/c4_demo\.h5", kind, times=2)
    s3fs.S3FileSystem.clear_instance_cache()
    result = cache_flow(params(llamafactory, gpt2_path, f"{bucket}/faulty", proxy.url))
    assert proxy.plan.rules[0].hits == 2
    assert result["summary"]["samples_written"] == 300
    assert np.array_equal(
        sequences(f"{bucket}/faulty/c4_demo.h5", s3_endpoint), sequences(f"{bucket}/clean/c4_demo.h5", s3_endpoint)
    )


def test_faults_above_the_budget_fail_cleanly(s3_bucket, s3_endpoint, proxy, llamafactory, gpt2_path):
    bucket, _ = s3_bucket
    proxy.plan.add("PUT", r"/doomed/c4_demo\.h5", "503", times=10**6)
    s3fs.S3FileSystem.clear_instance_cache()
    state = cache_flow(params(llamafactory, gpt2_path, f"{bucket}/doomed", proxy.url), return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=r"1 of 1 chunks failed:\n.*c4_demo.jsonl"):
        state.result()
    # every attempt failed (s3fs retries a SlowDown itself, then the task retried twice) and then it stopped
    hits = proxy.plan.rules[0].hits
    assert hits >= 3
    fs = s3fs.S3FileSystem(endpoint_url=s3_endpoint)
    assert not fs.exists(f"{bucket}/doomed/c4_demo.h5")
    assert proxy.plan.rules[0].hits == hits
    manifest = f"{bucket}/doomed/h5pipe-manifest.json"
    assert not fs.exists(manifest) or "c4_demo.h5" not in json.loads(fs.cat(manifest))["entries"]


def test_debug_logs_of_an_s3_run_hold_no_key_or_secret(s3_bucket, s3_endpoint, llamafactory, gpt2_path, tmp_path):
    bucket, _ = s3_bucket
    log_file = tmp_path / "debug.log"
    handler = logging.FileHandler(log_file)
    handler.setLevel(logging.DEBUG)
    loggers = [logging.getLogger(name) for name in ("", "botocore", "aiobotocore", "s3fs", "fsspec", "prefect")]
    saved = [(lg, lg.level) for lg in loggers]
    for lg in loggers:
        lg.setLevel(logging.DEBUG)
    logging.getLogger().addHandler(handler)
    try:
        cache_flow(params(llamafactory, gpt2_path, f"{bucket}/logged", s3_endpoint))
    finally:
        logging.getLogger().removeHandler(handler)
        for lg, level in saved:
            lg.setLevel(level)
        handler.close()
    text = log_file.read_text(errors="replace")
    assert "botocore" in text or "s3fs" in text  # the debug output was really captured
    assert S3_ENV["AWS_ACCESS_KEY_ID"] not in text
    assert S3_ENV["AWS_SECRET_ACCESS_KEY"] not in text
    record = s3fs.S3FileSystem(endpoint_url=s3_endpoint).cat(f"{bucket}/logged/h5pipe-run.json").decode()
    assert S3_ENV["AWS_SECRET_ACCESS_KEY"] not in record and S3_ENV["AWS_ACCESS_KEY_ID"] not in record
