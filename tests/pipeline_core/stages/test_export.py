import json
from pathlib import Path

import pytest
from datasets import Dataset

from pipeline_core import export_dataset, fetch_files

pytestmark = pytest.mark.usefixtures("hf_offline")


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


def test_a_smaller_re_export_removes_the_chunks_the_larger_one_left(tmp_path):
    """In process too (the flow did it already): a later cache of the folder would read them."""
    rows = [{"text": f"row {i}"} for i in range(25)] + [{"text": float("nan")}]
    assert len(export_dataset(rows, tmp_path, chunk_size=10)) == 3
    assert (tmp_path / "train_chunk_2.errors.jsonl").exists()  # the nan row's quarantine line
    urls = export_dataset(rows[:15], tmp_path, chunk_size=10)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["train_chunk_0.jsonl", "train_chunk_1.jsonl"]
    assert [r["text"] for u in urls for r in read_lines(u)] == [f"row {i}" for i in range(15)]


def test_a_process_func_editing_its_row_leaves_the_callers_list_as_it_was(tmp_path):
    rows = [{"text": "a"}, {"text": "b"}]

    def shout(row):
        row["text"] += "!"
        return row

    first = read_lines(export_dataset(rows, tmp_path / "1", process_func=shout)[0])
    second = read_lines(export_dataset(rows, tmp_path / "2", process_func=shout)[0])
    assert first == second == [{"text": "a!"}, {"text": "b!"}] and rows == [{"text": "a"}, {"text": "b"}]


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


# --- sources, converters and the richer result ------------------------------------------------------

BAD_ROWS = [
    {"instruction": "Add 1 and 2", "input": "", "output": "3"},
    {"instruction": "No answer", "input": ""},  # alpaca without output
    {"instruction": "Say hi", "input": "", "output": "hi"},
]


def write_jsonl(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    return path


def test_rejected_rows_are_counted_and_quarantined(tmp_path):
    from pipeline_core.stages.export import export_source

    result = export_source(BAD_ROWS, tmp_path, converter="alpaca", name="mine", chunk_size=2)
    assert [len(read_lines(u)) for u in result.urls] == [1, 1]
    assert read_lines(result.urls[1])[0]["messages"][-1]["content"] == [{"type": "text", "value": "hi"}]
    first, second = result.chunks
    assert (first.rows_in, first.rows_out, first.rows_failed, dict(first.failed)) == (2, 1, 1, {"missing_field": 1})
    assert first.errors_url == str(tmp_path / "train_chunk_0.errors.jsonl") and second.errors_url is None
    errors = read_lines(first.errors_url)
    assert "output" in errors[0].pop("message")
    assert errors == [{"dataset": "mine", "index": 1, "reason": "missing_field", "field": "output"}]
    assert not (tmp_path / "train_chunk_1.errors.jsonl").exists()
    counts = result.datasets["mine"]
    assert (counts.rows_read, counts.rows_failed, result.rows_failed, result.rows_in) == (3, 1, 1, 3)
    assert result.to_dict()["failed"] == {"missing_field": 1}
    fixed = [dict(BAD_ROWS[0]), {**BAD_ROWS[1], "output": "ok"}, dict(BAD_ROWS[2])]
    export_source(fixed, tmp_path, converter="alpaca", chunk_size=2)  # a clean rerun removes the stale file
    assert not (tmp_path / "train_chunk_0.errors.jsonl").exists()


@pytest.mark.parametrize(
    ("converter", "row", "reason"),
    [
        ("sharegpt", {"conversations": [{"from": "alien", "value": "hi"}]}, "unknown_role"),
        ("messages", {"messages": [{"role": "user", "content": "not a list"}]}, "wrong_type"),
    ],
)
def test_bad_rows_of_other_converters_are_skipped_with_their_reason(tmp_path, converter, row, reason):
    from pipeline_core.stages.export import export_source

    result = export_source([row], tmp_path, converter=converter)
    assert result.rows_out == 0 and set(result.failed) == {reason}
    assert read_lines(result.chunks[0].errors_url)[0]["reason"] == reason


def test_on_error_raise_names_dataset_row_and_field(tmp_path):
    from pipeline_core.sources import SourceRowError

    path = write_jsonl(tmp_path / "alpaca.jsonl", BAD_ROWS)
    with pytest.raises(SourceRowError, match=r"dataset 'alpaca' row 1: field 'output'.*on_error='skip'"):
        export_dataset(path, tmp_path / "out", converter="alpaca", on_error="raise")
    assert not list((tmp_path / "out").glob("*.jsonl"))
    with pytest.raises(ValueError, match="on_error must be 'skip' or 'raise'"):
        export_dataset(path, tmp_path / "out", on_error="ignore")


def test_process_func_sees_the_converted_sample(tmp_path):
    path = write_jsonl(tmp_path / "a.jsonl", BAD_ROWS[:1])
    urls = export_dataset(path, tmp_path / "out", converter="alpaca", process_func=lambda s: {"n": len(s["messages"])})
    assert read_lines(urls[0]) == [{"n": 2}]


@pytest.mark.parametrize(("n_rows", "sizes"), [(10, [4, 4, 2]), (8, [4, 4]), (0, [0])])
def test_streaming_source_is_cut_every_chunk_size_rows(tmp_path, n_rows, sizes):
    from pipeline_core.stages.export import export_source, plan_chunks

    ds = Dataset.from_dict({"id": list(range(n_rows))})
    assert plan_chunks(ds, 4) == len(sizes)
    assert (plan_chunks(ds, 4, streaming=True) is None) == bool(n_rows)  # datasets cannot stream 0 rows
    streamed = export_source(ds, tmp_path / "s", chunk_size=4, streaming=True)
    sized = export_source(ds, tmp_path / "z", chunk_size=4)
    assert [c.rows_out for c in streamed.chunks] == sizes
    assert [Path(u).read_bytes() for u in streamed.urls] == [Path(u).read_bytes() for u in sized.urls]


def test_export_chunk_checks_its_index_and_needs_a_sized_source(tmp_path):
    from pipeline_core.stages.export import export_chunk

    ds = Dataset.from_dict({"id": list(range(10))})
    assert export_chunk(ds, 2, tmp_path, chunk_size=4).rows_out == 2
    with pytest.raises(ValueError, match="chunk 3 does not exist: 10 rows make 3 chunks"):
        export_chunk(ds, 3, tmp_path, chunk_size=4)
    with pytest.raises(TypeError, match="export_chunk needs a sized source"):
        export_chunk(ds.to_iterable_dataset(), 0, tmp_path)
    with pytest.raises(ValueError, match="chunk_size must be a positive"):
        export_chunk(ds, 0, tmp_path, chunk_size=0)


def test_file_sources_and_source_tag(tmp_path):
    path = write_jsonl(tmp_path / "corpus.jsonl", [{"text": "a"}, {"text": "b"}])
    assert read_lines(export_dataset(str(path), tmp_path / "plain")[0]) == [{"text": "a"}, {"text": "b"}]
    tagged = export_dataset(path, tmp_path / "tagged", tag_source=True)
    assert read_lines(tagged[0]) == [{"text": "a", "_source": "corpus"}, {"text": "b", "_source": "corpus"}]
