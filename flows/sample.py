"""``h5pipe sample``: the shipped sample as files, a tokenizer trained on it, and run.yaml."""

from __future__ import annotations

from pathlib import Path

import orjson
import yaml

from pipeline_core.errors import ConfigError
from pipeline_core.sources.sample import sample_rows
from pipeline_core.tokenizer.auto import AutoTokenizer


def write_sample(output: Path, rows: int = 600) -> Path:
    """Write the sample into ``output``; a folder holding a sample of other rows is refused before
    anything in it changes (its outputs were made with its own data and tokenizer)."""
    output = output.absolute()
    data, path = output / "data" / "sample.jsonl", output / "run.yaml"
    records = sample_rows(rows)
    body = b"".join(orjson.dumps(r) + b"\n" for r in records)
    config = _config(output, data, rows)
    _refuse_another_sample(output, data, body, path, config)
    data.parent.mkdir(parents=True, exist_ok=True)
    data.write_bytes(body)
    texts = [r["text"] for r in records]
    AutoTokenizer.train(texts, vocab_size=1000).save(output / "tokenizer")
    path.write_text(config, encoding="utf-8")
    return path


def _refuse_another_sample(output: Path, data: Path, body: bytes, path: Path, config: str) -> None:
    same_data = not data.exists() or data.read_bytes() == body
    same_config = not path.exists() or path.read_text(encoding="utf-8") == config
    if not (same_data and same_config):
        raise ConfigError(
            f"{output} holds a sample written with other settings (another --rows?), and outputs made "
            "from its data and tokenizer: remove the folder, or pass another --output"
        )


def _config(output: Path, data: Path, rows: int) -> str:
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
    return yaml.safe_dump(config, sort_keys=False)
