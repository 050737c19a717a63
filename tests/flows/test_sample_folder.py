"""``h5pipe sample`` into a folder that holds a sample of other rows changes nothing and exits 2:
its outputs were made from that data and tokenizer, which a rewrite would replace under them."""

from __future__ import annotations

from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def _files(folder):
    return {p.relative_to(folder): p.read_bytes() for p in sorted(folder.rglob("*")) if p.is_file()}


def test_another_rows_count_is_refused_before_anything_changes(tmp_path):
    first = runner.invoke(app, ["sample", "--output", str(tmp_path), "--rows", "60", "--no-run"])
    assert first.exit_code == 0, first.output
    before = _files(tmp_path)
    assert (tmp_path / "data" / "sample.jsonl").read_bytes().count(b"\n") == 60
    again = runner.invoke(app, ["sample", "--output", str(tmp_path), "--rows", "60", "--no-run"])
    assert again.exit_code == 0, again.output
    other = runner.invoke(app, ["sample", "--output", str(tmp_path), "--rows", "90", "--no-run"])
    assert other.exit_code == 2
    assert "holds a sample written with other settings" in other.output and "another --output" in other.output
    assert _files(tmp_path) == before
