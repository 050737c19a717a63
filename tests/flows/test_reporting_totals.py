"""The run summary carries the stage's row and sample counts as the chunks' results hold them."""

from __future__ import annotations

from collections import Counter

from flows.reporting import chunk_rows, totals
from pipeline_core.stages.results import CacheStats
from tasks.cache import _counts
from tasks.models import ChunkResult


def result(rows_read: int, written: int, samples: int, skipped: dict, dropped: dict) -> ChunkResult:
    stats = CacheStats(rows_read=rows_read, rows_written=written, samples_written=samples)
    stats.skipped, stats.dropped = Counter(skipped), Counter(dropped)
    return ChunkResult(sha256="0" * 64, size=1, **_counts(stats))


def test_dropped_turns_reach_the_summary_apart_from_skipped_rows():
    chunks = [
        result(10, 8, 15, {"too_long": 2}, {"too_long": 1}),  # 8 rows kept 15 turns, one turn dropped
        result(5, 4, 4, {"no_end_token": 1}, {}),
    ]
    assert [(c.rows_written, c.samples_dropped, c.dropped) for c in chunks] == [(8, 1, {"too_long": 1}), (4, 0, {})]
    summary = totals(chunks)
    assert summary["rows_read"] == 15 and summary["rows_skipped"] == 3 and summary["samples_written"] == 19
    assert summary["rows_written"] == 12 == summary["rows_read"] - summary["rows_skipped"]
    assert summary["skipped_by_reason"] == {"no_end_token": 1, "too_long": 2}
    assert summary["samples_dropped"] == 1 and summary["dropped_by_reason"] == {"too_long": 1}


def test_a_run_without_dropped_turns_keeps_its_summary_as_before():
    summary = totals([result(3, 3, 3, {}, {})])
    assert "samples_dropped" not in summary and "dropped_by_reason" not in summary


def test_results_cached_before_the_counts_were_apart_still_load():
    old = {"input_url": "i", "output_url": "o", "source_sha256": "s", "sha256": "h", "size": 1}
    loaded = ChunkResult(**old, rows_read=2, samples_written=2, rows_skipped=0)
    assert loaded.rows_written is None and loaded.samples_dropped == 0 and loaded.dropped == {}


def test_the_chunk_table_shows_dropped_turns_per_chunk_when_any():
    chunks = [result(10, 8, 15, {"too_long": 2}, {"too_long": 1}), result(5, 4, 4, {"no_end_token": 1}, {})]
    rows = chunk_rows(chunks, [False, True])
    assert [(r["samples_dropped"], r["dropped_by_reason"]) for r in rows] == [(1, "too_long=1"), (0, "-")]
    assert [r["skipped_by_reason"] for r in rows] == ["too_long=2", "no_end_token=1"]
    assert [list(r) for r in rows][0] == [list(r) for r in rows][1]  # one set of columns


def test_the_chunk_table_has_no_dropped_columns_without_dropped_turns():
    (row,) = chunk_rows([result(3, 3, 3, {}, {})], [False])
    assert "samples_dropped" not in row and "dropped_by_reason" not in row
