"""JsonlReader batches: bounded by rows and by bytes; the fast parse path agrees with the careful one."""

import json
import tempfile
from pathlib import Path

import numpy as np
import orjson
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import ConfigError, ProcessorFactory, cache_file
from pipeline_core.errors import RowError
from pipeline_core.formats.h5 import open_h5
from pipeline_core.formats.jsonl import BOM, JsonlReader, parse_line
from pipeline_core.stages.cache import CacheOptions
from tests.conftest import load_json_or_jsonl


def write_lines(folder: Path, lines: list[bytes]) -> Path:
    path = folder / "c.jsonl"
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


@settings(max_examples=150, deadline=None)
@given(
    sizes=st.lists(st.integers(0, 60), max_size=40),
    batch_size=st.integers(1, 8),
    batch_bytes=st.one_of(st.none(), st.integers(1, 120)),
)
def test_batches_end_at_the_row_or_the_byte_bound_whichever_comes_first(sizes, batch_size, batch_bytes):
    lines = [json.dumps({"text": "x" * n}).encode() if n % 7 else b"" for n in sizes]  # some blank lines
    with tempfile.TemporaryDirectory() as folder:
        path = write_lines(Path(folder), lines)
        batches = [
            [n for n, _ in sorted(_numbered(b))] for b in JsonlReader(str(path), batch_size, None, None, batch_bytes)
        ]
    # expected, line by line: close a batch before a line that would overflow it, and after a full one
    expected, current, held = [], [], 0
    for number, line in enumerate(lines, start=1):
        if held and batch_bytes is not None and held + len(line) > batch_bytes:
            expected.append(current)
            current, held = [], 0
        current.append(number)
        held += len(line)
        if len(current) == batch_size:
            expected.append(current)
            current, held = [], 0
    expected += [current] if current else []
    assert batches == expected


def _numbered(batch):
    return [*zip(batch.lines, batch.rows), *batch.errors]


def test_a_line_longer_than_the_byte_bound_is_a_batch_of_its_own(tmp_path):
    lines = [b'{"text": "a"}', b'{"text": "' + b"b" * 500 + b'"}', b'{"text": "c"}', b'{"text": "d"}']
    batches = list(JsonlReader(str(write_lines(tmp_path, lines)), batch_size=10, batch_bytes=100))
    assert [b.lines for b in batches] == [[1], [2], [3, 4]]


def careful_parse(raw: bytes):
    """The documented procedure, step by step: drop a BOM and a trailing \\r, refuse blank lines,
    parse, then require an object."""
    if raw.startswith(BOM):
        raw = raw[len(BOM) :]
    if raw.endswith(b"\r"):
        raw = raw[:-1]
    if not raw.strip():
        return "blank_line"
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return "error"
    return value if isinstance(value, dict) else "not_an_object"


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)


@settings(max_examples=400, deadline=None)
@given(
    value=json_values,
    bom=st.booleans(),
    before=st.sampled_from([b"", b" ", b"\t"]),
    after=st.sampled_from([b"", b" ", b"\r", b" \r", b"\r\r", b"\t\r"]),
    cut=st.one_of(st.none(), st.integers(0, 30)),
)
def test_the_fast_parse_agrees_with_the_careful_procedure(value, bom, before, after, cut):
    body = orjson.dumps(value)
    raw = (BOM if bom else b"") + before + (body if cut is None else body[:cut]) + after
    expected = careful_parse(raw)
    got = parse_line(raw)
    if isinstance(got, RowError):
        assert got.reason in ("blank_line", "not_an_object", "invalid_json", "invalid_utf8")
        assert expected == ("error" if got.reason in ("invalid_json", "invalid_utf8") else got.reason)
    else:
        assert got == expected


@pytest.mark.parametrize("batch_bytes, match", [(0, "batch_bytes must be positive"), (-5, "batch_bytes")])
def test_a_byte_bound_that_cannot_hold_a_byte_is_refused(batch_bytes, match):
    with pytest.raises(ConfigError, match=match):
        CacheOptions(batch_bytes=batch_bytes)
    with pytest.raises(ConfigError, match="batch_size must be positive"):
        CacheOptions(batch_size=0)


@pytest.fixture
def c4_chunk(llamafactory, tmp_path):
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:40]
    return write_lines(tmp_path, [json.dumps(r, ensure_ascii=False).encode() for r in rows])


def read_all(url) -> tuple[dict, dict]:
    with open_h5(url) as f:
        return {k: f[k][...] for k in f}, dict(f.attrs)


@pytest.mark.parametrize("options", [{"pack_size": 64, "pad_value": 0}, {}])
def test_the_output_does_not_depend_on_where_batches_end(c4_chunk, gpt2, tmp_path, options):
    processor = ProcessorFactory.create("pt", gpt2)
    runs = [
        cache_file(str(c4_chunk), str(tmp_path / name), processor, CacheOptions(**options, **bounds))
        for name, bounds in [
            ("default", {}),
            ("tiny", {"batch_bytes": 300, "batch_size": 5}),
            ("rows", {"batch_bytes": None}),
        ]
    ]
    (data, attrs), *others = [read_all(r.output_url) for r in runs]
    for other_data, other_attrs in others:
        assert sorted(other_data) == sorted(data)
        for key, values in data.items():
            np.testing.assert_array_equal(other_data[key], values)
            assert other_data[key].dtype == values.dtype
        assert {k: str(v) for k, v in other_attrs.items() if k != "source_url"} == {
            k: str(v) for k, v in attrs.items() if k != "source_url"
        }


def hash_threads() -> list:
    import threading

    return [t for t in threading.enumerate() if t.name.startswith("h5pipe-hash")]


def test_the_sha256_taken_in_its_own_thread_is_the_files_and_no_thread_outlives_the_read(tmp_path):
    import hashlib

    lines = [json.dumps({"text": f"row {i} " + "x" * (i % 5000)}).encode() for i in range(3000)]
    path = write_lines(tmp_path, lines)  # several 1 MiB read blocks
    reader = JsonlReader(str(path), batch_size=100)
    assert sum(len(b) for b in reader) == len(lines)
    assert reader.sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
    assert not hash_threads()
    for _ in JsonlReader(str(path), batch_size=100):
        break  # leaving early stops the hashing thread too
    assert not hash_threads()


def test_a_file_of_one_block_is_hashed_without_a_thread_and_a_longer_one_with_it(tmp_path, monkeypatch):
    import hashlib

    import pipeline_core.formats.jsonl as jsonl_module

    started = []
    real = jsonl_module.WriteBehind
    monkeypatch.setattr(jsonl_module, "WriteBehind", lambda *a, **k: started.append(1) or real(*a, **k))
    small = write_lines(tmp_path, [json.dumps({"text": f"row {i}"}).encode() for i in range(50)])
    reader = JsonlReader(str(small), batch_size=10)
    assert sum(len(b) for b in reader) == 50
    assert reader.sha256 == hashlib.sha256(small.read_bytes()).hexdigest()
    assert started == []  # one block: hashed in the reading thread
    big_dir = tmp_path / "big"
    big_dir.mkdir()
    big = write_lines(big_dir, [json.dumps({"text": "y" * 3000 + str(i)}).encode() for i in range(1000)])  # ~3 MB
    reader = JsonlReader(str(big), batch_size=100)
    assert sum(len(b) for b in reader) == 1000
    assert reader.sha256 == hashlib.sha256(big.read_bytes()).hexdigest()  # first block inline, the rest behind
    assert started == [1]
