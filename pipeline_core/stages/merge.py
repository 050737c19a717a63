"""``merge_output``: a cache output folder's per-chunk Megatron files -> one dataset per key.

    merge_output("out/", "merged/all")   # merged/all_text_document.bin/.idx (+ its manifest)

The chunks come from the folder's manifest, in the natural order of their inputs (the order the
cache run read them); each chunk's files are ``{stem}_{key}_{level}.bin/.idx`` (see
``formats.megatron.output``). Every key all chunks share is merged, streaming (one chunk at a time
in memory), into ``{prefix}_{key}_{level}``. The prefix's folder is created and gets its own
``h5pipe-manifest.json`` (stage ``merge``) listing the merged files with their sha256, so
``h5pipe verify`` checks them like any output; it must not be the input folder, whose manifest
belongs to the cache run.
"""

from __future__ import annotations

import posixpath
import re

from pipeline_core.commit.manifest import Manifest, ManifestEntry, load_manifest, save_manifest
from pipeline_core.errors import ConfigError
from pipeline_core.formats.megatron.output import LEVELS, merge_megatron
from pipeline_core.stages.outputs import output_stem
from pipeline_core.storage.fs import fetch_files, natural_key, url_to_fs
from pipeline_core.storage.hashing import file_digest

STAGE = "merge"


def merge_output(input_dir: str, out_prefix: str, storage_options: dict | None = None) -> dict[str, str]:
    """Merge the Megatron files of the cache output ``input_dir`` at ``out_prefix``; {key: merged prefix}."""
    out_dir = posixpath.dirname(str(out_prefix).rstrip("/")) or "."
    if _same_folder(input_dir, out_dir, storage_options):
        raise ConfigError(
            f"merge into another folder than the chunks' ({input_dir}): its manifest lists the cache run's outputs"
        )
    maps = chunk_prefixes(input_dir, storage_options)
    merged = merge_megatron(maps, str(out_prefix), storage_options)
    _record(out_dir, input_dir, merged, len(maps), storage_options)
    return merged


def chunk_prefixes(input_dir: str, storage_options: dict | None = None) -> list[dict[str, str]]:
    """Per chunk, in input order: {file key: prefix URL} of its Megatron files."""
    manifest = load_manifest(input_dir, storage_options)
    if manifest is None or manifest.stage != "cache":
        raise ConfigError(f"{input_dir} has no cache manifest; merge the output folder of a finished cache run")
    inputs = sorted({r["input_url"] for r in _results(manifest)}, key=natural_key)
    stems = [output_stem(u) for u in inputs]
    indexes = [u.rsplit("/", 1)[-1] for u in fetch_files(input_dir, ".idx", storage_options)]
    maps: dict[str, dict[str, str]] = {s: {} for s in stems}
    for name in indexes:
        match = _owner(name, stems)
        if match:
            stem, key, level = match
            maps[stem][key] = input_dir.rstrip("/") + "/" + f"{stem}_{key}_{level}"
    if not any(maps.values()):
        raise ConfigError(
            f"{input_dir} holds no Megatron files; run the cache stage with output_format megatron or both"
        )
    return [maps[s] for s in stems]


def _owner(name: str, stems: list[str]) -> tuple[str, str, str] | None:
    """(stem, key, level) of ``{stem}_{key}_{level}.idx``, the longest stem winning."""
    for stem in sorted(stems, key=len, reverse=True):
        found = re.fullmatch(re.escape(stem) + r"_(.+)_(" + "|".join(LEVELS) + r")\.idx", name)
        if found:
            return stem, found.group(1), found.group(2)
    return None


def _results(manifest: Manifest) -> list[dict]:
    results = [e.extra.get("result") for e in manifest.entries.values()]
    return [r for r in results if r and r.get("input_url")]


def _record(out_dir: str, input_dir: str, merged: dict[str, str], chunks: int, storage_options) -> None:
    """List the merged files in ``out_dir``'s manifest (a merge folder's, never another stage's)."""
    manifest = load_manifest(out_dir, storage_options) or Manifest(STAGE, STAGE)
    if manifest.stage != STAGE:
        raise ConfigError(f"{out_dir} holds {manifest.stage} outputs; merge into a folder of its own")
    for key, prefix in merged.items():
        for ext in (".bin", ".idx"):
            digest = file_digest(prefix + ext, storage_options)
            name = posixpath.basename(prefix + ext)
            extra = {"merged_from": input_dir, "chunks": chunks, "key": key}
            manifest.entries[name] = ManifestEntry(name, digest.sha256, digest.size, extra=extra)
    save_manifest(out_dir, manifest.to_json(), storage_options)


def _same_folder(a: str, b: str, storage_options) -> bool:
    fs_a, path_a = url_to_fs(a, storage_options)
    fs_b, path_b = url_to_fs(b, storage_options)
    return type(fs_a) is type(fs_b) and path_a.rstrip("/") == path_b.rstrip("/")
