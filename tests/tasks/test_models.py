"""CacheJob: every cache option reaches cache_file, and only those that shape a file key it."""

from __future__ import annotations

import dataclasses

import pytest

from flows.cache_flow import make_job
from flows.params import CacheParams
from pipeline_core.stages.cache import CacheOptions
from tasks.models import CacheJob


def job(**settings) -> CacheJob:
    return CacheJob(input_url="in", output_dir="out", tokenizer={}, processor={}, tokenizer_fingerprint="f", **settings)


def test_cache_options_are_cache_file_options():
    names = {f.name for f in dataclasses.fields(CacheOptions)}
    assert set(job().cache_options()) <= names
    assert CacheOptions(**job(batch_bytes=123).cache_options()).batch_bytes == 123


def test_batch_bounds_and_the_error_limit_do_not_key_outputs():
    base = job().settings()
    assert job(batch_size=7, batch_bytes=100, max_error_rate=0.5, encode_width=1).settings() == base
    assert job(pack_size=8, pad_value=0, packing="bfd").settings() != base
    assert job(output_format="both").settings() != base


@pytest.mark.parametrize("batch_bytes", [1 << 10, None])
def test_the_flow_parameters_reach_the_job(gpt2_path, tmp_path, batch_bytes):
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    params = CacheParams(
        input=str(tmp_path), output=str(tmp_path / "out"), tokenizer=tokenizer, batch_bytes=batch_bytes
    )
    assert make_job(params).cache_options()["batch_bytes"] == batch_bytes


def test_batch_bytes_must_be_positive(tmp_path):
    with pytest.raises(ValueError, match="batch_bytes"):
        CacheParams(input=str(tmp_path), output=str(tmp_path), tokenizer={"path": "t.json"}, batch_bytes=0)
