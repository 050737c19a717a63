"""``position_ids: derived`` through the cache stage: for pt/concat, sft/bfd and dpo/bfd the
readers give what a stored file gives, the file is smaller and says how it was written, verify
accepts both, and Megatron output is untouched."""

from __future__ import annotations

import filecmp

import h5py
import pytest
import torch

from pipeline_core import CacheOptions, ConfigError, ProcessorFactory, cache_file, load_h5, read_attrs
from pipeline_core.commit.verify import h5_problems
from pipeline_core.loader import H5Dataset
from tasks.models import CacheJob
from tests.conftest import load_json_or_jsonl
from tests.pipeline_core.stages.test_cache_outputs import alpaca_rows, dpo_rows, write_jsonl

CASES = {  # processor, tokenizer fixture, rows, packing
    "pt-concat": ("pt", "gpt2", "c4", "concat"),
    "sft-bfd": ("sft", "trained", "alpaca", "bfd"),
    "dpo-bfd": ("dpo", "trained", "dpo", "bfd"),
}


def rows_of(name, llamafactory):
    if name == "c4":
        return load_json_or_jsonl(llamafactory / "c4_demo.jsonl")
    return alpaca_rows(llamafactory) if name == "alpaca" else dpo_rows(llamafactory)


def write_both(tmp_path, request, llamafactory, case, **options):
    processor_name, tokenizer, rows, packing = CASES[case]
    processor = ProcessorFactory.create(processor_name, request.getfixturevalue(tokenizer))
    source = str(write_jsonl(tmp_path / "in.jsonl", rows_of(rows, llamafactory)))
    urls = {}
    for way in ("stored", "derived"):
        opts = CacheOptions(pack_size=512, pad_value=0, packing=packing, position_ids=way, **options)
        urls[way] = cache_file(source, str(tmp_path / way), processor, opts).output_url
    return urls


def assert_same(a: dict, b: dict) -> None:
    assert list(a) == list(b)
    for key in a:
        left, right = (a[key], b[key]) if isinstance(a[key], list) else ([a[key]], [b[key]])
        assert len(left) == len(right), key
        assert all(x.dtype == y.dtype and torch.equal(x, y) for x, y in zip(left, right)), key


@pytest.mark.parametrize("case", sorted(CASES))
def test_derived_files_read_the_same_and_are_smaller(tmp_path, request, llamafactory, case):
    urls = write_both(tmp_path, request, llamafactory, case)
    assert_same(load_h5(urls["stored"]), load_h5(urls["derived"]))
    labels = case != "pt-concat"  # pt has no loss mask to make labels from
    stored, derived = H5Dataset(urls["stored"], labels=labels), H5Dataset(urls["derived"], labels=labels)
    assert len(stored) == len(derived) > 1 and "position_ids" in derived.keys
    for i in range(len(stored)):
        assert_same(stored[i], derived[i])
    batch = [stored[i] for i in range(len(stored))], [derived[i] for i in range(len(derived))]
    assert_same(stored.collate(batch[0]), derived.collate(batch[1]))
    with h5py.File(urls["derived"]) as f:
        assert "position_ids" not in f
    assert read_attrs(urls["derived"])["position_ids_storage"] == "derived"
    assert read_attrs(urls["stored"])["position_ids_storage"] == "stored"
    sizes = {way: (tmp_path / way / "in.h5").stat().st_size for way in urls}
    n, pack_size = load_h5(urls["stored"])["position_ids"].shape
    assert sizes["stored"] - sizes["derived"] >= 2 * n * pack_size  # uint16 per token, gone
    assert h5_problems(urls["stored"]) == [] and h5_problems(urls["derived"]) == []


def test_megatron_output_is_the_same_either_way(tmp_path, request, llamafactory):
    write_both(tmp_path, request, llamafactory, "pt-concat", output_format="both")
    megatron = sorted(p.name for p in (tmp_path / "stored").iterdir() if p.suffix in (".bin", ".idx"))
    assert megatron and all(filecmp.cmp(tmp_path / "stored" / n, tmp_path / "derived" / n, False) for n in megatron)


def test_derived_needs_packing_and_unknown_choices_are_refused():
    with pytest.raises(ConfigError, match="pack_size"):
        CacheOptions(position_ids="derived")
    with pytest.raises(ConfigError, match="position_ids"):
        CacheOptions(pack_size=8, pad_value=0, position_ids="computed")


def test_derived_is_in_the_settings_and_stored_keys_as_before():
    job = dict(input_url="i", output_dir="o", tokenizer={}, processor={}, tokenizer_fingerprint="t", pack_size=8)
    stored, derived = CacheJob(**job).settings(), CacheJob(**job, position_ids="derived").settings()
    assert "position_ids" not in stored  # folders written before the option keep their key
    assert derived == {**stored, "position_ids": "derived"}


def test_verify_names_a_packed_file_that_lost_its_position_ids(tmp_path, request, llamafactory):
    urls = write_both(tmp_path, request, llamafactory, "pt-concat")
    with h5py.File(urls["derived"], "a") as f:
        f.attrs["position_ids_storage"] = "stored"  # says stored, holds none
    with h5py.File(urls["stored"], "a") as f:
        f.attrs["position_ids_storage"] = "derived"  # says derived, holds them
    assert any("no position_ids" in p for p in h5_problems(urls["derived"]))
    assert any("derives them" in p for p in h5_problems(urls["stored"]))
