"""pipeline_flow end to end: local -> S3 (moto server) and S3 -> local equal a local-only run."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import s3fs

from flows.params import PipelineParams
from flows.pipeline_flow import pipeline_flow
from pipeline_core.formats.h5 import data_keys, decode_attr, open_h5

# attributes that name where a file came from, not what it holds
LOCATION_ATTRS = {"source_url"}


def pipeline_params(source, jsonl_out, h5_out, gpt2_path, storage=None):
    run = {"storage": storage or {}, "retry_delay": 0.05}
    return PipelineParams.model_validate(
        {
            "export": {"source": str(source), "output": str(jsonl_out), "chunk_size": 120, "run": run},
            "cache": {
                "output": str(h5_out),
                "tokenizer": {"path": str(gpt2_path), "eos_token": "<|endoftext|>"},
                "processor": "pt",
                "pack_size": 512,
                "pad_value": 0,
                "run": run,
            },
        }
    )


def read_h5(url, storage=None):
    with open_h5(url, storage) as f:
        arrays = {k: f[k][...] for k in f}
        attrs = {k: decode_attr(v) for k, v in f.attrs.items() if k not in LOCATION_ATTRS}
        return arrays, attrs, data_keys(f)


def assert_same_outputs(a_urls, b_urls, a_storage=None, b_storage=None):
    assert [u.rsplit("/", 1)[-1] for u in a_urls] == [u.rsplit("/", 1)[-1] for u in b_urls]
    for a, b in zip(a_urls, b_urls):
        arrays_a, attrs_a, keys_a = read_h5(a, a_storage)
        arrays_b, attrs_b, keys_b = read_h5(b, b_storage)
        assert keys_a == keys_b and set(arrays_a) == set(arrays_b)
        for key in arrays_a:
            assert np.array_equal(arrays_a[key], arrays_b[key]), key
        assert attrs_a == attrs_b


def h5_urls(result, output):
    return [c["output_url"] for c in result["chunks"]]


@pytest.fixture()
def local_run(tmp_path, llamafactory, gpt2_path):
    from flows.cache_flow import cache_flow
    from flows.export_flow import export_flow

    p = pipeline_params(llamafactory / "c4_demo.jsonl", tmp_path / "local/jsonl", tmp_path / "local/h5", gpt2_path)
    exported = export_flow(p.export)
    cached = cache_flow(p.cache.model_copy(update={"input": exported["urls"]}))
    return exported, cached


def test_local_dataset_to_s3_equals_local_run(local_run, s3_bucket, tmp_path, llamafactory, gpt2_path):
    bucket, storage = s3_bucket
    p = pipeline_params(llamafactory / "c4_demo.jsonl", f"{bucket}/run/jsonl", f"{bucket}/run/h5", gpt2_path, storage)
    result = pipeline_flow(p)
    assert result["export"]["rows_out"] == 300 and result["cache"]["samples_written"] == 300
    fs = s3fs.S3FileSystem(**storage)
    names = sorted(p.rsplit("/", 1)[-1] for p in fs.ls(f"{bucket}/run/h5"))
    assert "h5pipe-manifest.json" in names and "h5pipe-run.json" in names
    s3_h5 = [f"{bucket}/run/h5/train_chunk_{i}.h5" for i in range(3)]
    assert_same_outputs(h5_urls(local_run[1], None), s3_h5, None, storage)
    local_lines = [Path(u).read_bytes() for u in local_run[0]["urls"]]
    s3_lines = [fs.cat(f"{bucket}/run/jsonl/train_chunk_{i}.jsonl") for i in range(3)]
    assert local_lines == s3_lines
    record = fs.cat(f"{bucket}/run/h5/h5pipe-run.json").decode()
    assert "h5pipe-test-secret-value" not in record and "h5pipe-test-key-id" not in record


def test_s3_source_to_local_equals_local_run(local_run, s3_bucket, tmp_path, llamafactory, gpt2_path):
    bucket, storage = s3_bucket
    fs = s3fs.S3FileSystem(**storage)
    fs.put(str(llamafactory / "c4_demo.jsonl"), f"{bucket}/raw/c4_demo.jsonl")
    p = pipeline_params(
        f"{bucket}/raw/c4_demo.jsonl", tmp_path / "from_s3/jsonl", tmp_path / "from_s3/h5", gpt2_path, storage
    )
    result = pipeline_flow(p)
    assert result["cache"]["samples_written"] == 300
    assert_same_outputs(
        h5_urls(local_run[1], None), [str(tmp_path / f"from_s3/h5/train_chunk_{i}.h5") for i in range(3)]
    )


def test_s3_rerun_is_cached_and_rewrites_nothing(s3_bucket, llamafactory, gpt2_path):
    bucket, storage = s3_bucket
    p = pipeline_params(llamafactory / "c4_demo.jsonl", f"{bucket}/r/jsonl", f"{bucket}/r/h5", gpt2_path, storage)
    pipeline_flow(p)
    fs = s3fs.S3FileSystem(**storage)
    etags = {
        k: fs.info(k)["ETag"] + str(fs.info(k)["LastModified"]) for k in fs.find(f"{bucket}/r/h5") if k.endswith(".h5")
    }
    from flows.cache_flow import cache_flow

    again = cache_flow(p.cache.model_copy(update={"input": f"{bucket}/r/jsonl"}))
    assert again["cached"] == [True, True, True]
    fs.invalidate_cache()
    assert {k: fs.info(k)["ETag"] + str(fs.info(k)["LastModified"]) for k in etags} == etags
    manifest = json.loads(fs.cat(f"{bucket}/r/h5/h5pipe-manifest.json"))
    assert len(manifest["entries"]) == 3
