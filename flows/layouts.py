"""What a cache run writes into its output folder, and what it leaves of an earlier run's.

A cache run writes its outputs into ``output`` itself (the folder's own manifest), or with
``val_size`` or ``shuffle`` into the split folders ``output/train`` and ``output/validation``
(flows/splits_flow.py); these are the folder's *parts*. A rerun that no longer writes a part
the folder holds would leave it there, complete and readable, made with settings the config no
longer has: with ``val_size`` dropped, ``validation/`` stayed, and its rows were in the new
training data too. So such a run is refused, as any change of settings into a written folder is
(``open_for_run``), unless ``overwrite``; then it retires those parts once its own outputs are
committed (pipeline_core/commit/retire.py). A part whose manifest lists no output (a retirement
cut short) holds nothing to keep and is retired without asking.
"""

from __future__ import annotations

import json

from flows.params import CacheParams
from flows.run_record import RUN_RECORD
from pipeline_core.commit.manifest import Manifest, load_manifest
from pipeline_core.commit.retire import retire
from pipeline_core.errors import ConfigError
from pipeline_core.stages.splits import SPLITS
from pipeline_core.storage.fs import fetch_files, join_url, url_to_fs

PREPARED = "_prepared"
SPLITS_RECORD = "h5pipe-splits.json"
FOLDER = ""  # the part that is the output folder itself


def written_parts(params: CacheParams) -> set[str]:
    if params.val_size is not None:
        return set(SPLITS)
    return {"train"} if params.shuffle else {FOLDER}


def stale_parts(params: CacheParams, storage: dict) -> list[str]:
    """The parts the folder holds that this run does not write; a ConfigError saying how to go on
    when one holds committed outputs and the run may not ``overwrite`` them."""
    held = held_parts(params.output, storage)
    stale = sorted(set(held) - written_parts(params))
    kept = [part for part in stale if held[part].entries]
    if kept and not params.overwrite:
        raise ConfigError(_refusal(params, kept, storage))
    return stale


def held_parts(output: str, storage: dict) -> dict[str, Manifest]:
    """The parts of ``output`` with a cache manifest. Split folders count only where a split run
    wrote (its record or shards are there): a folder of that name made by a run of its own is not one."""
    parts = {FOLDER: load_manifest(output, storage)}
    if _split_run_wrote(output, storage):
        parts.update({split: load_manifest(join_url(output, split), storage) for split in SPLITS})
    return {part: m for part, m in parts.items() if m is not None and m.stage == "cache"}


def retire_parts(params: CacheParams, stale: list[str], storage: dict) -> list[str]:
    """Remove the ``stale`` parts (after this run's commit); an unsplit run also removes what split
    runs keep beside their parts, the record last. The URLs removed."""
    removed = []
    for part in stale:
        folder = join_url(params.output, part) if part else params.output
        shards = _shards(params.output, part, storage)
        removed += retire(folder, storage, with_files=[join_url(folder, RUN_RECORD), *shards])
        if part:
            _remove_tree(join_url(params.output, PREPARED, part), storage)  # the emptied shard folder
    if FOLDER in written_parts(params):  # the record last: until it is gone, a rerun sees the splits
        for name in (PREPARED, SPLITS_RECORD):
            removed += _remove_tree(join_url(params.output, name), storage)
    return removed


def _split_run_wrote(output: str, storage: dict) -> bool:
    return any(_exists(join_url(output, name), storage) for name in (SPLITS_RECORD, PREPARED))


def _exists(url: str, storage: dict) -> bool:
    fs, path = url_to_fs(url, storage)
    fs.invalidate_cache(path)  # another run may have written or removed it since this process listed
    return fs.exists(path)


def _shards(output: str, part: str, storage: dict) -> list[str]:
    """The prepared shards a split's run read, which go with it."""
    if not part:
        return []
    try:
        return fetch_files(join_url(output, PREPARED, part), ".jsonl", storage)
    except FileNotFoundError:
        return []


def _remove_tree(url: str, storage: dict) -> list[str]:
    """Remove a file or a folder with all it holds; ``[url]`` when there was one."""
    if not _exists(url, storage):
        return []
    fs, path = url_to_fs(url, storage)
    fs.rm(path, recursive=True)
    return [url]


def _refusal(params: CacheParams, kept: list[str], storage: dict) -> str:
    them = "them" if len(kept) > 1 or FOLDER in kept else "it"
    earlier = "" if FOLDER in kept else _recorded_flags(params.output, storage)
    keep = f"run with {earlier} again to keep {them}, " if earlier else ""
    this = _flags(params.val_size, params.shuffle) or "no val_size, no shuffle"
    return (
        f"{params.output} holds {_described(kept)} of an earlier run{f' with {earlier}' if earlier else ''}, "
        f"which this run ({this}) does not write: left there, {them} would be read as made with these settings; "
        f"{keep}write to another folder, or pass overwrite=True (CLI: --overwrite) to remove {them} once this "
        "run commits"
    )


def _described(parts: list[str]) -> str:
    splits = [part for part in parts if part]
    named = ["the unsplit outputs in the folder itself"] if FOLDER in parts else []
    if splits:
        named.append(f"the {' and '.join(splits)} split{'s' if len(splits) > 1 else ''}")
    return " and ".join(named)


def _recorded_flags(output: str, storage: dict) -> str:
    """The earlier split run's val_size and shuffle as CLI flags, from its record ('' without one)."""
    url = join_url(output, SPLITS_RECORD)
    if not _exists(url, storage):
        return ""
    fs, path = url_to_fs(url, storage)
    record = json.loads(fs.cat_file(path))
    return _flags(record.get("val_size"), record.get("shuffle"))


def _flags(val_size: float | None, shuffle: bool) -> str:
    count = val_size is not None and val_size >= 1  # a whole count of rows, a fraction below 1
    size = [f"--val-size {int(val_size) if count else val_size}"] if val_size is not None else []
    flags = size + (["--shuffle"] if shuffle else [])
    return " ".join(flags)
