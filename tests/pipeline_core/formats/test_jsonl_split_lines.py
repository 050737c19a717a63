"""A block's lines as views into it (long lines) or as copies (short ones): the same lines either way."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats import lines as line_split
from pipeline_core.formats.jsonl import JsonlReader
from pipeline_core.formats.lines import split_lines
from tests.reliability.test_bad_rows import DIRTY, HUGE

PADDING = json.dumps({"text": "long row " * 300}).encode()  # ~2.7 KB: blocks of such lines are split into views


@settings(max_examples=300, deadline=None)
@given(
    lines=st.lists(st.binary(max_size=80).map(lambda b: b.replace(b"\n", b"")), max_size=30),
    trailing_newline=st.booleans(),
    threshold=st.integers(0, 100),
)
def test_split_lines_gives_what_bytes_split_gives(lines, trailing_newline, threshold):
    block = b"\n".join(lines) + (b"\n" if trailing_newline else b"")
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_split, "LONG_LINES", threshold)
        parts = split_lines(block)
    assert [bytes(p) for p in parts] == block.split(b"\n")
    newlines = block.count(b"\n")
    as_views = newlines > 0 and len(block) >= threshold * newlines
    assert all(isinstance(p, memoryview if as_views else bytes) for p in parts)


def read(path, long_lines: int) -> tuple[list[tuple[int, dict]], list[tuple[int, str]]]:
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(line_split, "LONG_LINES", long_lines)
        batches = list(JsonlReader(str(path), batch_size=7))
    rows = [(n, row) for b in batches for n, row in zip(b.lines, b.rows)]
    return rows, [(n, e.reason) for b in batches for n, e in b.errors]


def test_every_bad_line_among_long_ones_is_named_as_when_lines_are_copied(tmp_path):
    raw = [line for line, _, _ in DIRTY if line is not HUGE]
    lines = [part for line in raw for part in (PADDING, line)]
    path = tmp_path / "long.jsonl"
    path.write_bytes(b"\n".join(lines) + b"\n")

    views, copies = read(path, line_split.LONG_LINES), read(path, 1 << 40)
    assert views == copies
    rows, errors = views
    # the reader's own reasons (the others are the processor's), line by line as written above
    reader_reasons = {
        "invalid_json",
        "invalid_utf8",
        "lone_surrogate",
        "non_finite_number",
        "not_an_object",
        "blank_line",
    }
    expected_errors = [
        (2 * i + 2, reason)
        for i, (line, reason, _) in enumerate(d for d in DIRTY if d[0] is not HUGE)
        if reason in reader_reasons
    ]
    assert errors == expected_errors
    assert len(rows) + len(errors) == len(lines)
    padding = json.loads(PADDING)
    assert all(row == padding for n, row in rows if n % 2 == 1)
    kept = {n: text for n, (_, _, text) in zip(range(2, 2 * len(raw) + 1, 2), (d for d in DIRTY if d[0] is not HUGE))}
    assert all(row["text"] == kept[n] for n, row in rows if n % 2 == 0 and kept[n] is not None)
