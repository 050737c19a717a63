"""bench/ceiling.py times the parts the pt stage cannot skip; its encode gives the tokenizer's own ids."""

from __future__ import annotations

import json

from tokenizers import Tokenizer

from bench import ceiling


def test_steps_time_every_part_and_encode_every_text(tmp_path, gpt2_path, monkeypatch):
    texts = ["Hello world", "a b c " * 50, "ünïcödé text\nwith a newline"] * 700  # over one batch
    files = []
    for k in range(2):
        f = tmp_path / f"train_chunk_{k}.jsonl"
        f.write_text("".join(json.dumps({"text": t}) + "\n" for t in texts), encoding="utf-8")
        files.append(f)
    monkeypatch.setattr(ceiling, "GPT2", gpt2_path)
    encoded = []
    real = ceiling.clocked

    def keep(work):
        wall, cpu, out = real(work)
        encoded.append(out)
        return wall, cpu, out

    monkeypatch.setattr(ceiling, "clocked", keep)
    parts = ceiling.steps(files)
    assert list(parts) == ["read", "parse", "encode"]
    assert all(wall > 0 and cpu >= 0 for wall, cpu in parts.values())
    assert encoded[1] == texts * 2  # every line's text, in order
    ids = [list(row) for batch in encoded[2] for row in batch.to_list()]
    reference = Tokenizer.from_file(str(gpt2_path))
    assert ids == [e.ids for e in reference.encode_batch(texts * 2, add_special_tokens=False)]
