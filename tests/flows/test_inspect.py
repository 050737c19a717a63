"""``h5pipe inspect`` decodes a sample only with the tokenizer the file was written with: ids read
through another tokenizer make plausible text that is not what the file holds."""

from __future__ import annotations

import json

from flows.inspect import describe_file
from pipeline_core import AutoTokenizer, ProcessorFactory, cache_jsonl


def _cached(tmp_path, tokenizer, rows):
    src = tmp_path / "in.jsonl"
    src.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    [out] = cache_jsonl(src, tmp_path / "o", ProcessorFactory.create("pt", tokenizer))
    return str(out)


def test_the_run_tokenizer_decodes_and_another_one_is_refused(gpt2_path, gpt2, tmp_path):
    out = _cached(tmp_path, gpt2, [{"text": "The quick brown fox jumps over the lazy dog."}])
    shown = describe_file(out, str(gpt2_path))
    assert "sample 0 (sequence, 11 tokens):\nThe quick brown fox jumps over the lazy dog.<|endoftext|>" in shown
    other = tmp_path / "other"
    AutoTokenizer.train(["a b c d e f g"] * 50, vocab_size=300).save(other)
    refused = describe_file(out, str(other))
    assert "The quick brown fox" not in refused
    assert f"(sample 0 not decoded: the tokenizer at {other} is not the one this file was written with" in refused
    assert "pass --tokenizer with the tokenizer the run used" in refused


def test_roles_are_taken_from_the_file_not_from_the_tokenizer_folder(gpt2_path, tmp_path):
    """The same tokenizer.json with a pad role the run set: still the run's tokenizer."""
    padded = AutoTokenizer.from_file(gpt2_path, eos_token="<|endoftext|>", pad_token="<|endoftext|>")
    out = _cached(tmp_path, padded, [{"text": "hello world"}])
    assert "sample 0 (sequence, 3 tokens):\nhello world<|endoftext|>" in describe_file(out, str(gpt2_path))


def test_a_packed_files_rows_are_called_packs(gpt2, gpt2_path, tmp_path):
    """A packed file's rows are packs of several documents: inspect called them samples, and
    "sample 1" decoded a pack."""
    from pipeline_core import CacheOptions, ProcessorFactory, cache_file, read_attrs

    path = tmp_path / "c.jsonl"
    path.write_text("".join(json.dumps({"text": f"document number {i}"}) + "\n" for i in range(6)))
    stats = cache_file(
        str(path), str(tmp_path / "out"), ProcessorFactory.create("pt", gpt2), CacheOptions(pack_size=16, pad_value=0)
    )
    packs = read_attrs(stats.output_url)["packs"]
    shown = describe_file(stats.output_url, str(gpt2_path), index=1)
    assert f"  sequence: {packs} packs, shape ({packs}, 16)" in shown
    assert "pack 1 (sequence, 16 tokens):" in shown and " samples," not in shown
