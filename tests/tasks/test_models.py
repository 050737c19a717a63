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


def test_sentence_items_with_moved_bos_or_eos_are_keyed_apart_from_the_files_written_before_the_fix():
    def settings(split_sentences: bool, **marks) -> dict:
        processor = {"processor": "pt", "processor_kwargs": marks}
        return job_with(processor, split_sentences=split_sentences).settings()

    assert "sentence_marks" not in settings(True)  # eos only, the default: those files were right
    assert "sentence_marks" not in settings(True, add_bos=False, add_eos=True)
    for marks in ({"add_bos": True}, {"add_eos": False}, {"add_bos": True, "add_eos": False}):
        assert settings(True, **marks)["sentence_marks"] == "per_document"
        assert "sentence_marks" not in settings(False, **marks)  # whole documents were always right


def test_bfd_truncation_is_keyed_apart_from_the_files_written_before_untrained_samples_were_skipped():
    def settings(overflow: str, **options) -> dict:
        return job_with({"processor": "sft", "overflow": overflow}, **options).settings()

    assert settings("truncate", pack_size=64, packing="bfd")["bfd_truncate"] == "untrained_skipped"
    for overflow, options in [
        ("drop", {"pack_size": 64, "packing": "bfd"}),
        ("truncate", {"pack_size": 64}),
        ("truncate", {}),
    ]:
        assert "bfd_truncate" not in settings(overflow, **options)  # unchanged files keep their keys


def job_with(processor: dict, **settings) -> CacheJob:
    return CacheJob(
        input_url="in", output_dir="out", tokenizer={}, processor=processor, tokenizer_fingerprint="f", **settings
    )
