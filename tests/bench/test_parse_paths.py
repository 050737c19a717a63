"""bench/parse_paths.py: both readers hand gigatoken every text whole and in order, so all three
pipelines count the tokens the tokenizer itself gives."""

from __future__ import annotations

import json

import gigatoken
from tokenizers import Tokenizer

from bench import parse_paths


def _files(tmp_path, texts):
    files = []
    for k in range(2):
        f = tmp_path / f"train_chunk_{k}.jsonl"
        rows = (json.dumps({"id": i, "text": t, "meta": {"n": [1, 2]}}) + "\n" for i, t in enumerate(texts))
        f.write_text("".join(rows), encoding="utf-8")
        files.append(f)
    return files


def test_the_pyarrow_reader_gives_every_text_over_arrows_buffers(tmp_path):
    texts = ["Hello world", "ünïcödé text\nwith a newline", 'a "quoted" \\ line', "x" * 5000] * 300
    files = _files(tmp_path, texts)
    got = [t for batch in parse_paths.arrow_texts(files) for t in batch.to_list()]
    assert got == texts * 2
    assert [t for batch in parse_paths.orjson_texts(files) for t in batch] == texts * 2


def test_every_pipeline_counts_the_tokenizers_own_tokens(tmp_path, gpt2_path):
    texts = ["Hello world", "a b c " * 50, "ünïcödé text\nwith a newline"] * 700  # over one raw batch
    files = _files(tmp_path, texts)
    reference = Tokenizer.from_file(str(gpt2_path))
    expected = sum(len(e.ids) for e in reference.encode_batch(texts * 2, add_special_tokens=False))
    source = gpt2_path.read_text(encoding="utf-8")
    for name, run in parse_paths.pipelines(files).items():
        assert run(gigatoken.Tokenizer.from_json(source)) == expected, name
