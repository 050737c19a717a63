"""A JSON source that pyarrow cannot parse is an error naming the file, the line and the reason
(datasets says only "An error occurred while generating the dataset"), loaded or streamed."""

from __future__ import annotations

import pickle

import pytest

from pipeline_core import SourceError
from pipeline_core.sources.open import open_source

GOOD = '{"text": "one"}\n{"text": "two"}\n'


def read_all(path, streaming):
    return [r.row for r in open_source(str(path), streaming=streaming).records()]


@pytest.mark.parametrize("streaming", [False, True])
@pytest.mark.parametrize(
    ("body", "line", "reason"),
    [
        (GOOD + '{"text": "bad \\ud800 here"}\n{"text": "after"}\n', 3, "no low surrogate in string"),
        ('{"text": "a", }\n' + GOOD, 1, "Expecting property name enclosed in double quotes"),
        ('{"text": "a", "score": NaN}\n{"text": "b" "c"}\n', 2, "Expecting ',' delimiter"),  # NaN reads fine
        (GOOD + '{"text": "cut off', 3, ""),
    ],
)
def test_the_first_bad_line_is_named(tmp_path, streaming, body, line, reason):
    path = tmp_path / "rows.jsonl"
    path.write_text(body, encoding="utf-8")
    with pytest.raises(SourceError) as e:
        read_all(path, streaming)
    assert str(e.value).startswith(f"cannot read {path}, line {line}: {reason}")
    assert str(e.value).endswith("fix or remove that line and export again")


def test_a_json_array_document_is_placed_by_its_line(tmp_path):
    path = tmp_path / "rows.json"
    path.write_text('[\n  {"text": "a"},\n  {"text": "b\\udc00"}\n]\n', encoding="utf-8")
    with pytest.raises(SourceError, match=r"rows.json, line 3: "):
        read_all(path, False)


def test_good_files_read_as_before_and_the_stream_pickles(tmp_path):
    path = tmp_path / "rows.jsonl"
    path.write_text(GOOD, encoding="utf-8")
    assert read_all(path, False) == read_all(path, True) == [{"text": "one"}, {"text": "two"}]
    stream = open_source(str(path), streaming=True).data  # the wrapped IterableDataset
    assert list(pickle.loads(pickle.dumps(stream))) == [{"text": "one"}, {"text": "two"}]


def test_an_io_error_is_not_diagnosed_and_a_failing_diagnosis_keeps_the_error(tmp_path):
    from pipeline_core.sources.json_lines import diagnosed

    path = tmp_path / "rows.jsonl"
    path.write_text('{"text": "x\\ud800"}\n', encoding="utf-8")
    parse = ValueError("JSON parse error")
    assert diagnosed(parse, [str(path)], None).endswith("line 1: no low surrogate in string (column 12)")
    io = RuntimeError("read failed")
    io.__cause__ = ConnectionResetError("peer reset")
    assert diagnosed(io, [str(path)], None) is None  # retried as it is, the files not read again
    assert diagnosed(parse, [str(tmp_path / "gone.jsonl")], None) is None  # the read's own error stands
