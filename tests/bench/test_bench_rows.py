"""Which rows the benchmark runs: rows needing a checkout are skipped with the reason, and the
report says so; the runner rows exist for every task runner (not timed)."""

from __future__ import annotations

from bench import machine
from bench.measure import Row
from bench.report import markdown
from bench.rows import ROWS
from bench.throughput import selected


def _row(name: str, **kw) -> Row:
    return Row(name, "pt", lambda ctx: None, **kw)


def test_a_row_needing_a_checkout_is_skipped_with_how_to_run_it(monkeypatch, tmp_path):
    monkeypatch.delenv("SOME_CHECKOUT", raising=False)
    rows = [_row("plain"), _row("megatron-like", needs_env="SOME_CHECKOUT")]
    chosen, skipped = selected(rows, None)
    assert [r.name for r in chosen] == ["plain"]
    assert "SOME_CHECKOUT=/path/to/checkout" in skipped["megatron-like"]
    monkeypatch.setenv("SOME_CHECKOUT", str(tmp_path))
    assert [r.name for r in selected(rows, None)[0]] == ["plain", "megatron-like"]


def test_only_filters_before_skipping(monkeypatch):
    monkeypatch.delenv("SOME_CHECKOUT", raising=False)
    rows = [_row("plain"), _row("megatron-like", needs_env="SOME_CHECKOUT")]
    assert selected(rows, "plain") == ([rows[0]], {})


def test_the_report_lists_the_rows_not_run():
    report = {
        "command": "x",
        "machine": {**machine.describe(), "load_end": "0"},
        "corpus": {"text_bytes": 1, "documents": 1, "chunks": 1, "chunk_mb": 1},
        "repeat": 1,
        "skipped": {"Megatron-LM preprocess_data.py": "MEGATRON_LM does not name a checkout"},
    }
    text = markdown(report, [])
    assert "- Megatron-LM preprocess_data.py: MEGATRON_LM does not name a checkout" in text


def test_every_task_runner_has_a_flow_row_and_megatron_has_its_row():
    names = {r.name for r in ROWS}
    assert {"h5pipe cache_flow pt packed 2048, processes", "h5pipe cache_flow pt packed 2048, dask"} <= names
    megatron = next(r for r in ROWS if r.name.startswith("Megatron-LM"))
    assert megatron.needs_env == "MEGATRON_LM"
