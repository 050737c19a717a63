"""The benchmark runs end to end on a tiny corpus and writes its table and chart (not timed)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.corpus import CorpusSpec, build, shape_row
from bench.report import lines
from bench.runner import Result

ROOT = Path(__file__).resolve().parents[2]
ROWS = "tokenizers encode_batch,gigatoken encode_batch,h5pipe cache pt packed,h5pipe cache sft,to_json,export_dataset"


@pytest.fixture(autouse=True)
def _fixtures(fixtures):
    """The corpus reads ../shared/fixtures (the GPT-2 tokenizer and the demo texts)."""


@pytest.mark.parametrize("doc", ["one two three four five six seven", "x" * 500, "a\nb c\nd e f g h i j k l m"])
def test_shapes_split_the_same_document(doc):
    sft, dpo = shape_row("sft", doc), shape_row("dpo", doc)
    assert shape_row("pt", doc) == {"text": doc}
    assert sft["query"] + sft["response"] == doc
    assert dpo["query"] + dpo["chosen"] + dpo["rejected"] == doc
    turns = shape_row("turns", doc)["messages"]
    assert [m["role"] for m in turns] == ["user", "assistant", "user", "assistant"]
    assert "".join(m["content"][0]["value"] for m in turns) == doc


def test_corpus_is_sized_and_reused(tmp_path):
    spec = CorpusSpec(size_mb=0.1, chunk_mb=0.03)
    corpus = build(tmp_path, spec)
    assert corpus.text_bytes >= 0.1 * (1 << 20)
    assert len(corpus.files("pt")) == len(corpus.files("sft")) == len(corpus.files("dpo")) >= 3
    mtime = corpus.files("pt")[0].stat().st_mtime_ns
    assert build(tmp_path, spec).files("pt")[0].stat().st_mtime_ns == mtime


def test_dealt_corpus_has_exactly_the_chunks_asked(tmp_path):
    corpus = build(tmp_path, CorpusSpec(size_mb=0.05, chunk_mb=0.001, chunks=7), shapes=("pt",))
    assert len(corpus.files("pt")) == 7


def test_ratio_is_reference_time_over_row_time():
    results = [
        Result("tokenizers encode_batch", 10.0, 1000, 1, [10.0], {}),
        Result("gigatoken encode_batch", 1.0, 1000, 1, [1.0], {}),
        Result("h5pipe cache_flow pt packed 2048", 2.0, 1010, 1, [2.0], {}),
    ]
    flow = lines(results)[2]
    assert flow.ratio == pytest.approx(5.0)
    assert flow.of_fast == pytest.approx(0.5)
    assert flow.verdict == "missed: 71% of target"


def test_benchmark_writes_table_and_chart(tmp_path):
    command = [sys.executable, str(ROOT / "bench" / "throughput.py"), "--size-mb", "0.2", "--chunk-mb", "0.1"]
    command += ["--repeat", "1", "--out", str(tmp_path), "--no-rerun", "--no-whole", "--no-latest", "--only", ROWS]
    subprocess.run(command, check=True, cwd=ROOT, capture_output=True, timeout=600)
    run = next(tmp_path.glob("run-*"))
    report = (run / "report.md").read_text()
    assert "| row | input | tokens |" in report
    assert "h5pipe cache pt packed 2048" in report and "load average" in report
    assert (run / "chart.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    rows = {r["name"]: r for r in json.loads((run / "results.json").read_text())["rows"]}
    assert rows["h5pipe cache pt packed 2048"]["tokens"] > 0
    assert all(r["error"] is None for r in rows.values())


def test_rerun_verdict_needs_every_chunk_cached():
    from bench.report import rerun_lines

    full = {"chunks": 100, "cached_chunks": 100, "chunk_kb": 105, "cold": 20.0, "warm": 1.0}
    assert rerun_lines(full)[0].endswith("warm/cold 5.0%: met (< 10%)")
    assert "missed (target < 10%, 1.5x over)" in rerun_lines({**full, "warm": 3.0})[0]
    assert "not measured: only 99 of 100 chunks" in rerun_lines({**full, "cached_chunks": 99})[0]


def test_flow_lines_split_wall_time_at_the_flow_function():
    from bench.report import flow_lines

    flow = {"name": "h5pipe cache_flow pt packed 2048", "seconds": 4.0, "detail": {"flow_seconds": 3.25}}
    other = {"name": "h5pipe cache pt", "seconds": 1.0, "detail": {}}
    (line,) = flow_lines([flow, other])
    assert "4.00 s wall = 3.25 s in the flow function" in line and "+ 0.75 s of Prefect around it" in line
    assert flow_lines([{**flow, "seconds": float("nan")}]) == []


def test_a_stationary_stream_suffixes_every_document_from_the_start():
    import re
    from itertools import islice

    from bench.corpus import documents

    plain = list(islice(documents(1 << 20), 5))
    stationary = list(islice(documents(1 << 20, stationary=True), 5))
    for doc, suffixed in zip(plain, stationary):
        assert suffixed.startswith(doc) and re.fullmatch(r"\n# [a-z]+( [a-z]+){7}\n", suffixed[len(doc) :])


def _row(name: str, tokens: int, seconds: float, **detail) -> dict:
    return {"name": name, "tokens": tokens, "seconds": seconds, "detail": detail, "error": None}


def test_run_cost_splits_the_target_row_and_finds_the_break_even_size():
    from bench.report import run_cost_lines
    from bench.rows import FLOW_PT, FLOW_SMALL, GIGA_PT, REF_PT

    rows = [
        _row(REF_PT, 1_000_000, 10.0),  # 0.1 M tok/s
        _row(GIGA_PT, 1_000_000, 0.5),  # 2 M tok/s
        _row(FLOW_PT, 1_000_100, 2.0),
        _row(FLOW_SMALL, 100, 1.0, rows=200, flow_seconds=0.6),
    ]
    fixed, rest, size = run_cost_lines(rows, text_bytes=1_000_100)  # one token per byte
    assert fixed.startswith("per-run cost: 1.00 s, the same flow on its first 200 rows (100 tokens; 0.60 s")
    assert "1,000,000 tokens in 1.00 s, 1.00 M tok/s = 10.0x raw tokenizers, 50% of raw gigatoken's rate" in rest
    # At 7x: T / 0.1e6 = 7 * (1.0 + T / 1e6)  ->  T = 7 / (1e-5 - 7e-6) = 2,333,333 tokens = 2.3 MB here
    assert "reaches 7x raw tokenizers from about 2 MB of text per run (this corpus: 1 MB)" in size


def test_run_cost_says_when_no_size_reaches_the_target():
    from bench.report import run_cost_lines
    from bench.rows import FLOW_PT, FLOW_SMALL, REF_PT

    rows = [_row(REF_PT, 1_000_000, 10.0), _row(FLOW_PT, 1_000_100, 3.0), _row(FLOW_SMALL, 100, 1.0)]
    *_, last = run_cost_lines(rows, text_bytes=1_000_100)  # 0.5 M tok/s beyond the per-run cost: 5x
    assert last == "at that rate the row stays under 7x raw tokenizers at any job size"
    assert run_cost_lines(rows[:2], text_bytes=1) == []


def test_memory_spread_compares_medians_and_the_limit_every_run():
    from bench.report import MIB, memory_verdict

    small = {"chunk_mb": 100, "peak_rss": 200 * MIB, "peaks": [190 * MIB, 200 * MIB, 260 * MIB]}
    large = {"chunk_mb": 1024, "peak_rss": 215 * MIB, "peaks": [215 * MIB, 210 * MIB, 230 * MIB]}
    limit, spread = memory_verdict([small, large])
    assert limit == "peak RSS <= 1.5 GiB: met (largest of any run 260 MiB)"
    assert spread == "within 10% between the chunks: met (+7.5%, medians of 3 run(s) per size)"
    _, spread = memory_verdict([small, {**large, "peak_rss": 221 * MIB}])
    assert spread.startswith("within 10% between the chunks: missed (+10.5%")
