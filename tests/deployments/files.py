"""Test inputs (JSONL chunks) and output checks: a folder against its manifest, where every listed
file exists with that sha256 and size, no data file is unlisted, and every file reads back with the
counts the manifest claims."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

from pipeline_core import load_h5, read_attrs
from pipeline_core.commit.verify import verify_output

MANIFEST = "h5pipe-manifest.json"


def write_chunks(folder: Path, rows: list[dict], n_chunks: int) -> Path:
    """``rows`` split into ``n_chunks`` files ``train_chunk_{i}.jsonl``."""
    folder.mkdir(parents=True, exist_ok=True)
    per = -(-len(rows) // n_chunks)
    for i in range(n_chunks):
        lines = [json.dumps(r, ensure_ascii=False) + "\n" for r in rows[i * per : (i + 1) * per]]
        (folder / f"train_chunk_{i}.jsonl").write_text("".join(lines), encoding="utf-8")
    return folder


def sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def data_files(folder: Path, suffix: str) -> list[str]:
    return sorted(p.name for p in folder.glob(f"*{suffix}") if not p.name.endswith(".errors.jsonl"))


def validate_folder(folder: Path, suffix: str) -> dict:
    """The manifest's entries, after checking each against its file; raises AssertionError otherwise.

    ``h5pipe verify``'s checks run first; the checks below recompute what they rely on independently.
    """
    report = verify_output(str(folder))
    assert report.ok, "\n".join(report.lines())
    manifest = json.loads((folder / MANIFEST).read_text(encoding="utf-8"))
    entries = manifest["entries"]
    assert sorted(entries) == data_files(folder, suffix), f"{folder}: manifest and files differ"
    for name, entry in entries.items():
        path = folder / name
        assert path.stat().st_size == entry["size"] and sha256(path) == entry["sha256"], f"{path} changed"
        check = check_h5 if suffix == ".h5" else check_jsonl
        check(path, entry)
    return entries


def check_h5(path: Path, entry: dict) -> None:
    attrs = read_attrs(str(path))
    assert attrs["complete"] is True, path
    assert (attrs["rows_read"], attrs["samples_written"]) == (entry["rows"], entry["samples"]), path
    assert attrs["tokens_written"] == entry["tokens"] > 0, path
    sequences = load_h5(str(path))["sequence"]
    assert len(sequences) == (attrs["packs"] if attrs["pack_size"] else attrs["samples_written"]), path


def check_jsonl(path: Path, entry: dict) -> None:
    rows = [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    assert len(rows) == entry["samples"] > 0, path
