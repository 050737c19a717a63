"""Retiring a committed output folder: a run whose settings no longer make it removes it.

A cache run with ``val_size`` writes ``OUTPUT/train`` and ``OUTPUT/validation``, each a complete
folder with its own manifest; a rerun without ``val_size`` no longer writes ``validation/``. Left
there, it stays complete and readable, made with settings the config no longer has, so that run
retires it (flows/layouts.py) as the final commit removes a dropped output (flows/commit.py):

1. the folder's manifest is rewritten listing no output, not complete, and naming every file it
   stood for under ``dropping``: from then on readers refuse the folder, and a later run that
   finds it so (cut short) sees nothing to keep in it and finishes the removal;
2. each of those files is removed;
3. the manifest itself is removed last.
"""

from __future__ import annotations

from collections.abc import Sequence

from pipeline_core.commit.manifest import Manifest, in_folder, load_manifest, manifest_url, save_manifest
from pipeline_core.storage.fs import remove_quietly


def retire(output_dir: str, storage_options: dict | None = None, with_files: Sequence[str] = ()) -> list[str]:
    """Remove the outputs ``output_dir``'s manifest lists (and ``with_files``: files that belong to
    them, such as the run record), then the manifest; the URLs removed. No manifest: nothing to do."""
    manifest = load_manifest(output_dir, storage_options)
    if manifest is None:
        return []
    dropping = [in_folder(output_dir, url) for url in manifest.dropping]  # of this folder, were it copied
    urls = sorted({*manifest.file_urls(output_dir), *dropping, *with_files})
    retiring = Manifest(manifest.stage, manifest.config_hash, complete=False, dropping=urls)
    save_manifest(output_dir, retiring.to_json(), storage_options)
    for url in urls:
        remove_quietly(url, storage_options)
    remove_quietly(manifest_url(output_dir), storage_options)
    return urls
