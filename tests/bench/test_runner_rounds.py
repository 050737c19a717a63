"""The bench takes several rows' runs in rounds: round i runs every row that wants an i-th run, in
order; a failed row runs no more and says why; each row keeps its best time and every peak."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench import runner


@pytest.fixture()
def calls(monkeypatch):
    """Every run_once call as (row, work folder name); the fake child's seconds come from ``times``."""
    seen: list[tuple[str, str]] = []
    times = {"a": [3.0, 2.0, 9.0], "b": [5.0, 4.0, 1.0], "c": [7.0]}

    def fake_run_once(name, corpus, work, log):
        seen.append((name, work.name))
        if name == "broken":
            raise RuntimeError("broken failed with exit code 1; see rows.log")
        seconds = times[name][sum(1 for n, _ in seen if n == name) - 1]
        return {"seconds": seconds, "tokens": 10, "peak_rss_self": int(seconds * 100), "detail": {"s": seconds}}, 0

    monkeypatch.setattr(runner, "run_once", fake_run_once)
    return seen


def test_runs_go_in_rounds_and_each_row_keeps_its_best(calls, tmp_path):
    seen_progress = []
    results = runner.measure_rounds(
        [("a", 2), ("b", 3), ("c", 1)], Path("corpus"), tmp_path, tmp_path / "log", lambda *p: seen_progress.append(p)
    )
    assert calls == [("a", "a-0"), ("b", "b-0"), ("c", "c-0"), ("a", "a-1"), ("b", "b-1"), ("b", "b-2")]
    assert [p[:2] for p in seen_progress] == [(0, "a"), (0, "b"), (0, "c"), (1, "a"), (1, "b"), (2, "b")]
    a, b, c = results
    assert (a.seconds, a.runs, a.peaks, a.peak_rss, a.detail) == (2.0, [3.0, 2.0], [300, 200], 300, {"s": 2.0})
    assert (b.seconds, b.runs) == (1.0, [5.0, 4.0, 1.0])
    assert (c.seconds, c.runs, c.error) == (7.0, [7.0], None)


def test_a_failed_row_stops_and_the_others_go_on(calls, tmp_path):
    broken, a = runner.measure_rounds([("broken", 3), ("a", 2)], Path("corpus"), tmp_path, tmp_path / "log")
    assert calls == [("broken", "broken-0"), ("a", "a-0"), ("a", "a-1")]
    assert broken.error == "broken failed with exit code 1; see rows.log" and broken.seconds != broken.seconds  # nan
    assert (a.seconds, a.error) == (2.0, None)


def test_measure_is_one_row_in_rounds(calls, tmp_path):
    result = runner.measure("b", Path("corpus"), tmp_path, 2, tmp_path / "log")
    assert calls == [("b", "b-0"), ("b", "b-1")] and result.seconds == 4.0
