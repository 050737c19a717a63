"""Every published file is in the commit record, and what verify reports a rerun rebuilds (issue 17, defect 8)."""

from __future__ import annotations

import json
import os
import time

import pytest

from flows.cache_flow import cache_flow
from pipeline_core.commit.verify import verify_output
from tests.conftest import load_json_or_jsonl
from tests.flows.test_cache_flow import params, write_chunks


@pytest.fixture()
def dirty_chunks(tmp_path, llamafactory):
    """Two chunks of c4 text with 5 rows lacking ``text`` in each (quarantined as missing_field)."""
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:100]
    for i in range(0, 100, 10):
        rows[i] = {"body": "no text field"}
    return write_chunks(tmp_path / "in", rows, 2)


def manifest(folder):
    return json.loads((folder / "h5pipe-manifest.json").read_text())["entries"]


def flip(path, at=-20):
    data = bytearray(path.read_bytes())
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("fmt", ["megatron", "both"])
def test_megatron_files_are_committed_verified_and_rebuilt(gpt2_path, dirty_chunks, tmp_path, fmt):
    out = tmp_path / "out"
    p = params(gpt2_path, dirty_chunks, out, output_format=fmt)
    cache_flow(p)
    bins = sorted(out.glob("*.bin"))
    assert bins and {b.name for b in bins} | {b.with_suffix(".idx").name for b in bins} <= set(manifest(out))
    report = verify_output(str(out))
    assert report.ok and report.checked >= 2 * len(bins)
    original = bins[0].read_bytes()
    flip(bins[0])
    (out / bins[-1].with_suffix(".idx").name).unlink()
    report = verify_output(str(out))
    assert not report.ok and bins[0].name in report.problems
    cache_flow(p)
    assert bins[0].read_bytes() == original
    assert verify_output(str(out)).ok


def test_quarantine_files_are_committed_and_a_forged_line_is_caught(gpt2_path, dirty_chunks, tmp_path):
    out = tmp_path / "out"
    p = params(gpt2_path, dirty_chunks, out)
    cache_flow(p)
    errors = out / "train_chunk_0.errors.jsonl"
    assert "train_chunk_0.errors.jsonl" in manifest(out)
    original = errors.read_bytes()
    lines = original.splitlines(keepends=True)
    forged = json.loads(lines[0])
    forged["line"] = 9999
    errors.write_bytes(json.dumps(forged).encode() + b"\n" + b"".join(lines[1:]))  # same line count
    report = verify_output(str(out))
    assert not report.ok and "train_chunk_0.errors.jsonl" in report.problems
    cache_flow(p)
    assert errors.read_bytes() == original and verify_output(str(out)).ok


def test_a_byte_change_with_the_mtime_set_back_is_reported_and_rebuilt(gpt2_path, dirty_chunks, tmp_path):
    out = tmp_path / "out"
    p = params(gpt2_path, dirty_chunks, out)
    cache_flow(p)
    h5 = out / "train_chunk_1.h5"
    original, st = h5.read_bytes(), h5.stat()
    time.sleep(0.05)
    with open(h5, "r+b") as f:  # in place: same inode and size
        f.seek(len(original) - 20)
        f.write(bytes([original[-20] ^ 0xFF]))
    os.utime(h5, ns=(st.st_atime_ns, st.st_mtime_ns))
    assert not verify_output(str(out)).ok
    cache_flow(p)
    assert h5.read_bytes() == original and verify_output(str(out)).ok
