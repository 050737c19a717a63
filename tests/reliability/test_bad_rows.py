"""Bad rows are quarantined to ``{stem}.errors.jsonl`` with line number and reason; the rest is kept.

One file holds every kind of dirty row next to good ones, written as raw bytes. Expectations are
written out line by line; rows in = rows out + rows quarantined is checked against an independent
count of the file's lines.
"""

from __future__ import annotations

import hashlib
import io
import json
import tracemalloc

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.commit.quarantine import ErrorRateExceeded
from pipeline_core.commit.verify import h5_problems
from pipeline_core.errors import BadRowError, ConfigError
from pipeline_core.formats.h5 import read_attrs
from pipeline_core.formats.jsonl import JsonlReader
from pipeline_core.formats.lines import OversizedLine, iter_raw_lines
from pipeline_core.processors import ProcessorFactory
from pipeline_core.stages.cache import CacheOptions, cache_file
from tests.reliability.helpers import assert_exactly_once, hidden

MIB = 1 << 20
HUGE = None  # stands for a 50 MB row in DIRTY (built only when a file is written)
LONG_TEXT = "word " * 400  # far over max_length=64 tokens


def huge_row() -> bytes:
    return b'{"text": "' + b"a" * (50 * MIB) + b'"}'


def line(row: dict) -> bytes:
    return json.dumps(row, ensure_ascii=False).encode("utf-8")


# (raw line, reason or None when kept, text kept)
DIRTY = [
    (
        b"\xef\xbb\xbf" + line({"text": "first row, after a byte order mark"}),
        None,
        "first row, after a byte order mark",
    ),
    (line({"text": "a good row"}), None, "a good row"),
    (b'{"text": "unterminated', "invalid_json", None),
    (b'{"text": "caf\xe9 au lait"}', "invalid_utf8", None),  # one Latin-1 byte
    (line({"text": "the row after a bad byte is fine"}), None, "the row after a bad byte is fine"),
    (b'{"text": "\\ud800 alone"}', "lone_surrogate", None),
    (b'{"text": "\\ud83d\\ude00 a real pair"}', None, "\U0001f600 a real pair"),
    (line({"text": "line\u2028separator and\u2029paragraph"}), None, "line\u2028separator and\u2029paragraph"),
    (b'{"text": "x", "score": NaN}', "non_finite_number", None),
    (b'{"text": "x", "score": 1e999}', "non_finite_number", None),
    (line({"text": 42}), "wrong_type", None),
    (line({"body": "no text field"}), "missing_field", None),
    (line({"text": None}), "missing_field", None),
    (line({"text": "   "}), "empty_text", None),
    (HUGE, "row_too_large", None),
    (line({"text": LONG_TEXT}), "too_long", None),
    (line(["a", "list"]), "not_an_object", None),
    (b"", "blank_line", None),
    (
        b"\xef\xbb\xbf" + line({"text": "a BOM inside the file (cat of two files)"}),
        None,
        "a BOM inside the file (cat of two files)",
    ),
    (line({"text": "windows line end"}) + b"\r", None, "windows line end"),
    (line({"text": "the last row, no newline at the end"}), None, "the last row, no newline at the end"),
]


@pytest.fixture(scope="module")
def dirty_file(tmp_path_factory):
    path = tmp_path_factory.mktemp("dirty") / "dirty.jsonl"
    path.write_bytes(b"\n".join(huge_row() if raw is HUGE else raw for raw, _, _ in DIRTY))  # no final newline
    return path


def read_errors(path) -> list[dict]:
    return [json.loads(x) for x in path.read_text(encoding="utf-8").splitlines()]


def test_every_kind_of_bad_row_is_quarantined_with_its_line_and_the_rest_kept(dirty_file, tmp_path, gpt2):
    processor = ProcessorFactory.create("pt", gpt2, max_length=64)
    stats = cache_file(str(dirty_file), str(tmp_path / "out"), processor)

    errors = read_errors(tmp_path / "out" / "dirty.errors.jsonl")
    expected = [(i + 1, reason) for i, (_, reason, _) in enumerate(DIRTY) if reason]
    assert [(e["line"], e["reason"]) for e in errors] == expected
    assert all(e["source"] == str(dirty_file) and e["message"] for e in errors)

    kept = [text for _, reason, text in DIRTY if reason is None]
    assert_exactly_once(stats.output_url, gpt2, kept)

    lines_in_file = dirty_file.read_bytes().count(b"\n") + 1  # counted independently of the reader
    attrs = read_attrs(stats.output_url)
    assert attrs["rows_read"] == lines_in_file == len(DIRTY)
    assert attrs["samples_written"] + len(errors) == lines_in_file
    assert attrs["skipped_by_reason"] == dict(sorted(stats.skipped.items()))
    assert attrs["max_row_bytes"] == 32 * MIB
    assert h5_problems(stats.output_url) == []


def test_on_error_raise_names_the_file_and_line_of_the_first_bad_row(dirty_file, tmp_path, gpt2):
    options = CacheOptions(on_error="raise")
    with pytest.raises(BadRowError, match=r"dirty\.jsonl:3: .*not valid JSON.*reason: invalid_json"):
        cache_file(str(dirty_file), str(tmp_path / "out"), ProcessorFactory.create("pt", gpt2), options)
    assert list((tmp_path / "out").iterdir()) == []  # nothing published, no temp left


def test_a_huge_row_is_skipped_without_being_held_in_memory(tmp_path):
    path = tmp_path / "huge.jsonl"
    path.write_bytes(line({"text": "before"}) + b"\n" + huge_row() + b"\n" + line({"text": "after"}) + b"\n")
    tracemalloc.start()
    try:
        batches = list(JsonlReader(str(path), max_row_bytes=MIB))
        peak = tracemalloc.get_traced_memory()[1]
    finally:
        tracemalloc.stop()
    assert [r["text"] for b in batches for r in b.rows] == ["before", "after"]
    assert [(n, e.reason) for b in batches for n, e in b.errors] == [(2, "row_too_large")]
    # two 1 MiB read blocks and the 1 MiB limit at most; holding the row alone would take 50 MB
    assert peak < 40 * MIB, f"peak {peak / MIB:.0f} MiB: the 50 MB row was held whole"


def test_max_error_rate_fails_the_chunk_with_the_rate_and_the_limit(tmp_path, gpt2):
    rows = [line({"text": f"row {i}"}) for i in range(7)] + [b"{bad", line({"text": ""}), line({"x": 1})]
    path = tmp_path / "c.jsonl"
    path.write_bytes(b"\n".join(rows) + b"\n")
    out = tmp_path / "out"
    processor = ProcessorFactory.create("pt", gpt2)
    message = (
        r"3 of 10 rows quarantined \(30\.00%\), over max_error_rate 20\.00%; reasons .*empty_text.*raise max_error_rate"
    )
    with pytest.raises(ErrorRateExceeded, match=message):
        cache_file(str(path), str(out), processor, CacheOptions(max_error_rate=0.2))
    assert not (out / "c.h5").exists() and hidden(out) == []
    assert len(read_errors(out / "c.errors.jsonl")) == 3  # the reasons stay readable

    stats = cache_file(str(path), str(out), processor, CacheOptions(max_error_rate=0.3))  # at the limit: fine
    assert stats.samples_written == 7 and stats.rows_skipped == 3


@pytest.mark.parametrize(
    "options, match",
    [
        ({"max_error_rate": 1.5}, "between 0 and 1"),
        ({"max_error_rate": -0.1}, "between 0 and 1"),
        ({"max_row_bytes": 0}, "positive"),
    ],
)
def test_impossible_limits_are_refused_with_how_to_fix(options, match):
    with pytest.raises((ConfigError, ValueError), match=match):
        CacheOptions(**options)


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=40).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    trailing_newline=st.booleans(),
    block_size=st.integers(1, 64),
    max_bytes=st.one_of(st.none(), st.integers(0, 30)),
)
def test_line_splitting_is_exact_for_any_block_size_and_limit(lines, trailing_newline, block_size, max_bytes):
    data = b"\n".join(lines) + (b"\n" if trailing_newline and lines else b"")
    hasher = hashlib.sha256()
    got = list(iter_raw_lines(io.BytesIO(data), block_size, hasher, max_bytes))
    want = data.split(b"\n")
    if want and want[-1] == b"":
        want.pop()
    assert [n for n, _ in got] == list(range(1, len(want) + 1))
    for (_, raw), expected in zip(got, want):
        if max_bytes is not None and len(expected) > max_bytes:
            assert raw == OversizedLine(len(expected), max_bytes)
        else:
            assert raw == expected
    assert hasher.hexdigest() == hashlib.sha256(data).hexdigest()
