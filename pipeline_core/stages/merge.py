"""``merge_output``: a cache output folder's per-chunk Megatron files -> one dataset per key.

    merge_output("out/", "merged/all")   # merged/all_text_document.bin/.idx (+ its manifest)

The chunks come from the folder's manifest, in the natural order of their inputs (the order the
cache run read them); each chunk's files are the ``{stem}_{key}_{level}.bin/.idx`` (see
``formats.megatron.output``) its manifest entry lists, never whatever else lies in the folder (a
file an earlier run left, of a key or level this run did not write, is no part of the output).
Every key is merged, streaming (one chunk at a time in memory), into ``{prefix}_{key}_{level}``;
a deferred key (``loss_weight``) that a chunk left out because its values were all 0 or 1 is made
there from the key it then repeats (``Processor.deferred_stand_ins``: ``loss_mask``). The prefix's folder is created and gets its own
``h5pipe-manifest.json`` (stage ``merge``) listing the merged files with their sha256, so
``h5pipe verify`` checks them like any output; it must not be the input folder, whose manifest
belongs to the cache run. Merging again into the same prefix replaces its files: those of a key
the new merge does not write (a ``loss_weight`` now all 0/1, a dropped text key) are removed.
"""

from __future__ import annotations

import posixpath
import re

from pipeline_core.commit.manifest import Manifest, ManifestEntry, load_manifest, save_manifest
from pipeline_core.errors import ConfigError
from pipeline_core.formats.megatron.output import LEVELS, merge_megatron
from pipeline_core.processors import ProcessorFactory
from pipeline_core.stages.outputs import output_stem
from pipeline_core.storage.fs import join_url, natural_key, remove_quietly, url_to_fs
from pipeline_core.storage.hashing import file_digest

STAGE = "merge"


def merge_output(input_dir: str, out_prefix: str, storage_options: dict | None = None) -> dict[str, str]:
    """Merge the Megatron files of the cache output ``input_dir`` at ``out_prefix``; {key: merged prefix}."""
    out_dir = posixpath.dirname(str(out_prefix).rstrip("/")) or "."
    if _same_folder(input_dir, out_dir, storage_options):
        raise ConfigError(
            f"merge into another folder than the chunks' ({input_dir}): its manifest lists the cache run's outputs"
        )
    manifest = _merge_manifest(out_dir, storage_options)  # before anything is written there
    maps = chunk_prefixes(input_dir, storage_options)
    merged = merge_megatron(maps, str(out_prefix), storage_options, ProcessorFactory.deferred_stand_ins())
    _retire_earlier(manifest, out_dir, posixpath.basename(str(out_prefix)), merged, storage_options)
    _record(manifest, out_dir, input_dir, merged, len(maps), storage_options)
    return merged


def chunk_prefixes(input_dir: str, storage_options: dict | None = None) -> list[dict[str, str]]:
    """Per chunk, in input order: {file key: prefix URL} of the Megatron files its manifest entry lists."""
    manifest = load_manifest(input_dir, storage_options)
    if manifest is None or manifest.stage != "cache":
        raise ConfigError(f"{input_dir} has no cache manifest; merge the output folder of a finished cache run")
    if not manifest.complete:
        raise ConfigError(f"{input_dir} is being written (its manifest is not complete); merge once the cache run ends")
    results = sorted(_results(manifest), key=lambda r: natural_key(r["input_url"]))
    maps = [_chunk_files(input_dir, r) for r in results]
    if not any(maps):
        raise ConfigError(
            f"{input_dir} holds no Megatron files; run the cache stage with output_format megatron or both"
        )
    return maps


def _chunk_files(input_dir: str, result: dict) -> dict[str, str]:
    """{file key: prefix URL} of one chunk's listed ``.idx`` files (each listed after its ``.bin``)."""
    stem = output_stem(result["input_url"])
    names = [result.get("output_url") or "", *(p["url"] for p in result.get("parts", []))]
    found = {}
    for name in (n.rsplit("/", 1)[-1] for n in names):
        if match := _owner(name, stem):
            key, level = match
            found[key] = join_url(input_dir, f"{stem}_{key}_{level}")
    return found


def _owner(name: str, stem: str) -> tuple[str, str] | None:
    """(key, level) of ``{stem}_{key}_{level}.idx``."""
    found = re.fullmatch(re.escape(stem) + r"_(.+)_(" + "|".join(LEVELS) + r")\.idx", name)
    return (found.group(1), found.group(2)) if found else None


def _results(manifest: Manifest) -> list[dict]:
    results = [e.extra.get("result") for e in manifest.entries.values()]
    return [r for r in results if r and r.get("input_url")]


def _merge_manifest(out_dir: str, storage_options) -> Manifest:
    """``out_dir``'s merge manifest (new if none); another stage's folder is refused."""
    manifest = load_manifest(out_dir, storage_options) or Manifest(STAGE, STAGE)
    if manifest.stage != STAGE:
        raise ConfigError(f"{out_dir} holds {manifest.stage} outputs; merge into a folder of its own")
    return manifest


def _retire_earlier(manifest: Manifest, out_dir: str, base: str, merged: dict[str, str], storage_options) -> None:
    """Remove the files an earlier merge into the same prefix wrote for a key (or level) this one did
    not write: left listed, a trainer would find a ``loss_weight`` or ``title`` dataset of another
    run beside this run's ``sequence``. Other prefixes' files in the folder are left alone."""
    written = {posixpath.basename(prefix) + ext for prefix in merged.values() for ext in (".bin", ".idx")}
    for name, entry in list(manifest.entries.items()):
        if name not in written and _prefix_of(name, entry.extra.get("key")) == base:
            remove_quietly(join_url(out_dir, name), storage_options)
            del manifest.entries[name]


def _prefix_of(name: str, key: str | None) -> str | None:
    """The merge prefix of ``{prefix}_{key}_{level}.bin|.idx``, by the key its entry records."""
    found = key and re.fullmatch(r"(.+)_" + re.escape(key) + r"_(" + "|".join(LEVELS) + r")\.(bin|idx)", name)
    return found.group(1) if found else None


def _record(manifest: Manifest, out_dir: str, input_dir: str, merged: dict[str, str], chunks: int, storage_options):
    """List the merged files in ``out_dir``'s merge manifest."""
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
