import json

import pytest
from datasets import Dataset

from pipeline_core import export_dataset, fetch_files


def read_lines(url):
    with open(url, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def test_chunks_of_a_dataset(tmp_path):
    ds = Dataset.from_dict({"id": list(range(2500)), "text": [f"row {i} é" for i in range(2500)]})
    urls = export_dataset(ds, tmp_path, chunk_size=1000)
    assert urls == [str(tmp_path / f"train_chunk_{i}.jsonl") for i in range(3)]
    chunks = [read_lines(u) for u in urls]
    assert [len(c) for c in chunks] == [1000, 1000, 500]
    assert [r["id"] for c in chunks for r in c] == list(range(2500))
    assert chunks[2][-1] == {"id": 2499, "text": "row 2499 é"}
    assert fetch_files(str(tmp_path), ".jsonl") == urls


def test_one_to_many_process_func(tmp_path):
    ds = Dataset.from_dict({"text": ["a b", "c", "d e f"]})
    urls = export_dataset(
        ds, tmp_path, prefix="words", chunk_size=2, process_func=lambda r: [{"w": w} for w in r["text"].split()]
    )
    assert [len(read_lines(u)) for u in urls] == [3, 3]
    assert [r["w"] for u in urls for r in read_lines(u)] == list("abcdef")
    assert urls[0].endswith("words_chunk_0.jsonl")


def test_process_func_dict_none_and_bad_return(tmp_path):
    ds = Dataset.from_dict({"n": [1, 2, 3]})
    urls = export_dataset(ds, tmp_path, process_func=lambda r: None if r["n"] == 2 else {"m": r["n"] * 10})
    assert read_lines(urls[0]) == [{"m": 10}, {"m": 30}]
    with pytest.raises(TypeError, match="return a dict"):
        export_dataset(ds, tmp_path / "x", process_func=lambda r: "nope")
    assert not list((tmp_path / "x").glob("*.jsonl"))  # nothing partial was published


def test_list_of_dicts_and_memory_url():
    import fsspec

    urls = export_dataset([{"a": i} for i in range(5)], "memory://exp", chunk_size=2)
    assert urls == [f"memory://exp/train_chunk_{i}.jsonl" for i in range(3)]
    with fsspec.open(urls[2], "rb") as f:
        assert f.read() == b'{"a":4}\n'
