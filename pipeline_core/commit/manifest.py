"""The manifest: one ``h5pipe-manifest.json`` per output folder, the commit record of a run.

An output counts as done only when the manifest lists it with its size and sha256 and the file
still matches. The manifest is rewritten atomically as chunks finish (at most about once a
second, flows/commit.py), so a crash loses at most the chunks in flight and those of the last
second, and a rerun redoes exactly the chunks without a verified entry. ``config_hash`` pins the settings the folder was written with: a rerun with other settings
into the same folder is refused unless the caller asks to overwrite.

Two runs writing the same folder at once may each rewrite the manifest; an entry lost that way
only makes a later run redo (and verify) that chunk, because outputs are published atomically
and are deterministic for a given input and config.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field

from pipeline_core.errors import ConfigError
from pipeline_core.storage.fs import join_url, url_to_fs, write_bytes_atomic
from pipeline_core.storage.hashing import FileDigest, matches
from pipeline_core.version import FORMAT_VERSION

MANIFEST = "h5pipe-manifest.json"


@dataclass(slots=True)
class ManifestEntry:
    name: str  # file name inside the output folder
    sha256: str
    size: int
    source_sha256: str = ""
    rows: int = 0
    samples: int = 0
    tokens: int = 0
    extra: dict = field(default_factory=dict)


@dataclass(slots=True)
class Manifest:
    stage: str
    config_hash: str
    format_version: str = FORMAT_VERSION
    entries: dict[str, ManifestEntry] = field(default_factory=dict)

    def to_json(self) -> bytes:
        body = {
            "stage": self.stage,
            "config_hash": self.config_hash,
            "format_version": self.format_version,
            "entries": {k: asdict(v) for k, v in sorted(self.entries.items())},
        }
        return json.dumps(body, indent=2, sort_keys=True).encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        entries = {k: ManifestEntry(**v) for k, v in body.get("entries", {}).items()}
        return cls(body["stage"], body["config_hash"], body.get("format_version", ""), entries)


def manifest_url(output_dir: str) -> str:
    return join_url(output_dir, MANIFEST)


def load_manifest(output_dir: str, storage_options: dict | None = None) -> Manifest | None:
    fs, path = url_to_fs(manifest_url(output_dir), storage_options)
    fs.invalidate_cache()
    if not fs.exists(path):
        return None
    with fs.open(path, "rb") as f:
        return Manifest.from_json(f.read())


def save_manifest(output_dir: str, data: bytes, storage_options: dict | None = None) -> None:
    """``data``: ``Manifest.to_json()``, written atomically."""
    write_bytes_atomic(manifest_url(output_dir), data, storage_options)


def open_for_run(
    output_dir: str, stage: str, config_hash: str, overwrite: bool, storage_options: dict | None = None
) -> Manifest:
    """The folder's manifest for a new run: refuses config drift unless ``overwrite``."""
    existing = load_manifest(output_dir, storage_options)
    if existing is None or (overwrite and existing.config_hash != config_hash):
        return Manifest(stage, config_hash)
    if existing.stage != stage or existing.config_hash != config_hash:
        raise ConfigError(
            f"{output_dir} already holds {existing.stage} outputs written with other settings "
            f"(config {existing.config_hash[:12]}, now {config_hash[:12]}); write to another folder, "
            "or pass overwrite=True (CLI: --overwrite) to replace them"
        )
    return existing


def entry_is_valid(
    output_dir: str, entry: ManifestEntry, storage_options: dict | None = None, how: str = "sha256"
) -> bool:
    return matches(join_url(output_dir, entry.name), FileDigest(entry.sha256, entry.size), storage_options, how)
