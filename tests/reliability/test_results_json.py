"""Prefect results beside the outputs hold JSON descriptors, never pickles of user objects."""

from __future__ import annotations

import json

from flows.cache_flow import cache_flow
from flows.export_flow import export_flow
from flows.params import ExportParams
from tests.reliability.helpers import cache_params, write_chunks, write_jsonl

OUR_MODELS = {"tasks.models.ChunkResult", "tasks.models.ExportChunkResult"}


def classes(value) -> set[str]:
    """Every ``__class__`` the JSON names (what Prefect's JSON decoder would import)."""
    if isinstance(value, dict):
        found = {value["__class__"]} if "__class__" in value else set()
        return found.union(*(classes(v) for v in value.values()))
    if isinstance(value, list):
        return set().union(*(classes(v) for v in value))
    return set()


def check_results_are_json(output) -> int:
    files = [p for p in (output / ".h5pipe" / "results").rglob("*") if p.is_file()]
    for path in files:
        data = path.read_bytes()
        assert not data.startswith(b"\x80"), f"{path.name} is a pickle"
        record = json.loads(data)
        assert record["metadata"]["serializer"]["type"] == "json", path.name
        result = json.loads(record["result"])
        assert classes(result) <= OUR_MODELS, f"{path.name} names {classes(result) - OUR_MODELS}"
        assert b"pickle" not in data.lower()
    return len(files)


def test_cache_flow_results_are_json(gpt2_path, tmp_path, c4_rows):
    out = tmp_path / "out"
    cache_flow(cache_params(gpt2_path, write_chunks(tmp_path / "in", c4_rows, 2), out))
    assert check_results_are_json(out) == 2  # one per chunk; the hash task persists nothing


def test_export_flow_results_are_json(tmp_path, c4_rows):
    source = write_jsonl(tmp_path / "src" / "rows.jsonl", c4_rows)
    out = tmp_path / "out"
    export_flow(ExportParams(source=str(source), output=str(out), chunk_size=100, run={"retry_delay": 0.05}))
    assert check_results_are_json(out) == 3
