"""The shuffle memory benchmark runs end to end on tiny data (not timed, nothing asserted on memory)."""

from __future__ import annotations

from bench.shuffle_memory import main


def test_shuffle_memory_benchmark_runs():
    [result] = main(["--sizes-mb", "1", "--bucket-mb", "1"])
    assert result["rows"]["train"] + result["rows"]["validation"] > 0 and result["peak_rss_mb"] > 0
