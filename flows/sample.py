"""``h5pipe sample``: the shipped sample as files, a tokenizer trained on it, and run.yaml."""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from pipeline_core.sources.sample import sample_rows
from pipeline_core.tokenizer.auto import AutoTokenizer


def write_sample(output: Path, rows: int = 600) -> Path:
    output = output.absolute()
    data = output / "data" / "sample.jsonl"
    data.parent.mkdir(parents=True, exist_ok=True)
    records = sample_rows(rows)
    data.write_bytes(b"".join(orjson.dumps(r) + b"\n" for r in records))
    texts = [r["text"] for r in records]
    AutoTokenizer.train(texts, vocab_size=1000).save(output / "tokenizer")
    config = {
        "flow": "pipeline",
        "export": {
            "source": str(data),
            "output": str(output / "jsonl"),
            "chunk_size": max(1, rows // 3),
            "process_func": "pipeline_core.sources.sample:as_sft",
        },
        "cache": {
            "output": str(output / "h5"),
            "tokenizer": {"path": str(output / "tokenizer")},
            "processor": "sft",
            "strategy": "chatml",
            "pack_size": 256,
        },
    }
    path = output / "run.yaml"
    path.write_text(yaml.safe_dump(config, sort_keys=False), encoding="utf-8")
    return path
