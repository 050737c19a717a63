"""Export writes every value exactly as the source gives it, or reports the row.

- Nested objects whose keys differ from row to row are typed ``Json`` by ``datasets``: the sized and
  the mixture paths must write the objects, never their JSON-encoded strings.
- NaN and +/-Infinity have no JSON form: a row holding one is not written but counted and
  quarantined as ``non_finite_number``, the rows around it are written unchanged.
"""

import json
import math

import numpy as np
import pytest
import yaml
from datasets import Dataset, Features, Image, load_dataset

from pipeline_core import ProcessorFactory
from pipeline_core.errors import ConfigError
from pipeline_core.sources import SourceRowError
from pipeline_core.stages.cache import cache_file
from pipeline_core.stages.export import export_source
from pipeline_core.stages.options import CacheOptions

pytestmark = pytest.mark.usefixtures("hf_offline")

# v1 messages whose objects differ in their keys: loss_weight and name are optional, and the
# top-level "meta" objects share no key, so datasets types both columns as Json.
MIXED_KEYS = [
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": "hi"}]},
            {"role": "assistant", "content": [{"type": "text", "value": "hello"}], "loss_weight": 0.5},
        ],
        "meta": {"origin": "hand", "turns": 2},
    },
    {
        "messages": [
            {"role": "system", "content": [{"type": "text", "value": "be brief"}], "name": "rules"},
            {"role": "user", "content": [{"type": "text", "value": "yo"}]},
            {"role": "assistant", "content": [{"type": "text", "value": "sup"}]},
        ],
        "meta": {"reviewed": True},
    },
    {
        "messages": [
            {"role": "user", "content": [{"type": "text", "value": "2+2?"}], "loss_weight": 0.0},
            {"role": "assistant", "content": [{"type": "text", "value": "4"}], "loss_weight": 1.0},
        ],
        "meta": {"scores": [1, 2.5, None]},
    },
]


def read_lines(url) -> list[dict]:
    with open(url, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def file_rows(path) -> list[dict]:
    """The source file's lines, parsed by the standard library (independent of datasets)."""
    with open(path, encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def as_datasets_gives(path) -> list[dict]:
    ds = load_dataset("json", data_files=str(path), split="train")
    return [ds[i] for i in range(len(ds))]


@pytest.fixture
def mixed_keys_file(tmp_path):
    path = tmp_path / "mixed_keys.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in MIXED_KEYS), encoding="utf-8")
    return path


@pytest.fixture
def v1_file(llamafactory):
    return llamafactory / "v1_sft_demo.jsonl"


def cache_writes_every_row(url, out, gpt2) -> None:
    processor = ProcessorFactory.create("sft", gpt2, strategy="alpaca")
    stats = cache_file(url, str(out), processor, CacheOptions())
    assert dict(stats.skipped) == {}
    assert stats.rows_written == stats.rows_read == len(read_lines(url))


@pytest.mark.parametrize("which", ["v1_file", "mixed_keys_file"])
def test_sized_export_writes_rows_as_datasets_and_the_file_give_them(request, which, tmp_path, gpt2):
    path = request.getfixturevalue(which)
    result = export_source(path, tmp_path / "out", chunk_size=200)
    exported = [row for url in result.urls for row in read_lines(url)]
    assert (result.rows_failed, len(exported)) == (0, len(file_rows(path)))
    assert exported == file_rows(path)
    assert exported == as_datasets_gives(path)
    cache_writes_every_row(result.urls[0], tmp_path / "h5", gpt2)


def test_streaming_and_sized_exports_are_byte_identical(mixed_keys_file, tmp_path):
    sized = export_source(mixed_keys_file, tmp_path / "sized")
    streamed = export_source(mixed_keys_file, tmp_path / "streamed", streaming=True)
    assert [c.sha256 for c in sized.chunks] == [c.sha256 for c in streamed.chunks]


def test_mixture_export_writes_rows_as_the_files_give_them(v1_file, mixed_keys_file, tmp_path, gpt2):
    mix = tmp_path / "mix.yaml"
    mix.write_text(yaml.safe_dump({"v1": {"file_name": str(v1_file)}, "mixed": {"file_name": str(mixed_keys_file)}}))
    result = export_source(str(mix), tmp_path / "out", chunk_size=10_000, seed=3)
    exported = read_lines(result.urls[0])
    by_source = {"v1": [], "mixed": []}
    for row in exported:
        by_source[row.pop("_source")].append(row)
    assert result.rows_failed == 0
    for name, path in (("v1", v1_file), ("mixed", mixed_keys_file)):
        expected = sorted(json.dumps(r, sort_keys=True) for r in file_rows(path))
        assert sorted(json.dumps(r, sort_keys=True) for r in by_source[name]) == expected
    cache_writes_every_row(result.urls[0], tmp_path / "h5", gpt2)


def test_a_column_json_cannot_hold_is_refused_by_name(tmp_path):
    images = Dataset.from_dict({"image": [{"bytes": b"abc", "path": None}]}, features=Features({"image": Image()}))
    with pytest.raises(ConfigError, match=r"column 'image'.*remove_columns"):
        export_source(images, tmp_path / "img")
    blobs = Dataset.from_dict({"text": ["a"], "blob": [b"\x00\x01"]})
    with pytest.raises(ConfigError, match=r"column 'blob'.*binary"):
        export_source(blobs, tmp_path / "blob")
    assert not list(tmp_path.glob("*/*.jsonl"))


# --- non-finite numbers ------------------------------------------------------------------------


NON_FINITE = [float("nan"), float("inf"), float("-inf")]


def scored_rows(bad: float | None) -> list[dict]:
    return [{"text": f"row {i}", "score": bad if i == 1 and bad is not None else i / 4} for i in range(3)]


def message_rows(bad: float | None) -> list[dict]:
    def row(i: int, weight: float) -> dict:
        return {
            "messages": [
                {"role": "user", "content": [{"type": "text", "value": f"q{i}"}], "loss_weight": 0.0},
                {"role": "assistant", "content": [{"type": "text", "value": f"a{i}"}], "loss_weight": weight},
            ]
        }

    return [row(i, bad if i == 1 and bad is not None else 1.0) for i in range(3)]


CASES = {"top-level": (scored_rows, "score"), "nested": (message_rows, "messages[1].loss_weight")}


def check_quarantined(result, rows: list[dict], field: str) -> None:
    assert (result.rows_in, result.rows_out, result.rows_failed) == (3, 2, 1)
    assert dict(result.failed) == {"non_finite_number": 1}
    assert read_lines(result.urls[0]) == [rows[0], rows[2]]
    (error,) = read_lines(result.chunks[0].errors_url)
    assert field in error.pop("message")
    assert error == {"dataset": "nums", "index": 1, "reason": "non_finite_number", "field": field}
    assert result.datasets["nums"].rows_failed == 1


@pytest.mark.parametrize("bad", NON_FINITE, ids=["nan", "inf", "-inf"])
@pytest.mark.parametrize("case", CASES)
def test_a_non_finite_number_quarantines_its_row(tmp_path, case, bad):
    make, field = CASES[case]
    rows = make(bad)
    from_list = export_source(rows, tmp_path / "list", name="nums")
    check_quarantined(from_list, rows, field)
    from_arrow = export_source(Dataset.from_list(rows), tmp_path / "arrow", name="nums")
    check_quarantined(from_arrow, rows, field)


def test_non_finite_numbers_made_by_process_func_are_caught(tmp_path):
    def add_vector(row: dict) -> dict:
        values = [0.5, math.nan] if row["text"] == "row 2" else [0.5, 1.5]
        return {**row, "vector": np.array(values, dtype=np.float32)}

    result = export_source(scored_rows(None), tmp_path, name="nums", process_func=add_vector)
    assert (result.rows_out, dict(result.failed)) == (2, {"non_finite_number": 1})
    assert read_lines(result.chunks[0].errors_url)[0]["index"] == 2


def test_under_raise_a_non_finite_number_stops_the_export(tmp_path):
    with pytest.raises(SourceRowError, match=r"dataset 'nums' row 1: field 'score'.*non_finite_number"):
        export_source(scored_rows(math.nan), tmp_path, name="nums", on_error="raise")


def test_nulls_and_the_word_null_are_written_unchanged(tmp_path):
    rows = [{"text": "null NaN Infinity", "score": None, "items": [{"w": None}, {"w": 2.0}]}, {"text": "-Infinity"}]
    result = export_source(rows, tmp_path, name="nums")
    assert (result.rows_failed, read_lines(result.urls[0])) == (0, rows)


# --- values JSON has no form for ----------------------------------------------------------------

UNENCODABLE = {
    "set": ({"tags": {"a"}}, "tags", "set"),
    "bytes": ({"meta": {"raw": b"\x00"}}, "meta.raw", "bytes"),
    "int beyond 64 bits": ({"ids": [1, 2**70]}, "ids[1]", str(2**70)),
    "non-string key": ({"meta": {"counts": {3: "three"}}}, "meta.counts", "key of type int"),
    "object array": ({"vec": np.array([1, "a"], dtype=object)}, "vec", "ndarray"),
}


def add_on_row_1(extra: dict):
    def process_func(row: dict) -> dict:
        return {**row, **extra} if row["text"] == "row 1" else row

    return process_func


@pytest.mark.parametrize("case", UNENCODABLE)
def test_a_value_json_cannot_hold_quarantines_its_row_by_path(tmp_path, case):
    extra, field, named = UNENCODABLE[case]
    rows = scored_rows(None)
    result = export_source(rows, tmp_path, name="nums", process_func=add_on_row_1(extra))
    assert (result.rows_in, result.rows_out, dict(result.failed)) == (3, 2, {"unencodable_value": 1})
    assert read_lines(result.urls[0]) == [rows[0], rows[2]]
    (error,) = read_lines(result.chunks[0].errors_url)
    message = error.pop("message")
    assert named in message and field in message
    assert error == {"dataset": "nums", "index": 1, "reason": "unencodable_value", "field": field}


def test_an_integer_beyond_64_bits_in_the_source_is_reported_by_path(tmp_path):
    rows = [{"text": "a", "n": 1}, {"text": "b", "n": -(2**64)}, {"text": "c", "n": 2**63 - 1}]
    result = export_source(rows, tmp_path, name="nums")
    assert read_lines(result.urls[0]) == [rows[0], rows[2]]  # 2**63 - 1 is the largest orjson writes
    (error,) = read_lines(result.chunks[0].errors_url)
    assert (error["index"], error["field"], error["reason"]) == (1, "n", "unencodable_value")


def test_under_raise_an_unencodable_value_stops_the_export_naming_it(tmp_path):
    with pytest.raises(SourceRowError, match=r"dataset 'nums' row 1: field 'tags'.*set.*unencodable_value"):
        export_source(
            scored_rows(None), tmp_path, name="nums", process_func=add_on_row_1({"tags": {1}}), on_error="raise"
        )


def test_nesting_deeper_than_orjson_goes_is_reported_for_the_row(tmp_path):
    deep: list = []
    for _ in range(300):
        deep = [deep]
    result = export_source(scored_rows(None), tmp_path, name="nums", process_func=add_on_row_1({"deep": deep}))
    (error,) = read_lines(result.chunks[0].errors_url)
    assert (error["index"], error["field"], error["reason"]) == (1, None, "unencodable_value")
    assert "orjson refuses" in error["message"]
