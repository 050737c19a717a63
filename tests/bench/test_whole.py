"""bench/whole.py's report: one line per whole-process row, the CLI-vs-raw ratio, bytes per token."""

from __future__ import annotations

from bench.whole import markdown, sample_size


def row(name, wall, **summary):
    return {"row": name, "wall": wall, "runs": [wall], "note": "", **summary}


def test_the_report_lists_every_row_and_the_ratio_to_raw_tokenizers():
    rows = [row("small job, kept server running", 1.5, chunks=1, tokens_written=1000, seconds=0.4)]
    rows.append(row("main corpus, --task-runner threads, kept server", 4.0, chunks=5, tokens_written=10**7))
    text = markdown({"rows": rows, "repeat": 3, "sample": {}}, raw_tokenizers_seconds=20.0)
    assert "| small job, kept server running | 1.50 | 1.50 | 1 | 1,000 | 0.4 |  |" in text
    assert "5.00x raw `tokenizers.encode_batch`" in text


def test_sample_size_counts_bytes_per_stored_token(tmp_path):
    (tmp_path / "a.h5").write_bytes(b"x" * 8192)
    found = sample_size(tmp_path, {"packs": 1, "tokens_written": 2000})
    assert found["bytes"] == 8192 and found["stored_tokens"] == 2048 and found["bytes_per_token"] == 4.0
