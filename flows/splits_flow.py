"""The cache flow with ``val_size`` or ``shuffle``: rows split and/or permuted first
(``pipeline_core.stages.splits``), then one ordinary cache run per split.

Layout of ``output``:

    output/_prepared/{train,validation}/*.jsonl   the split (shuffled) JSONL shards, the runs' inputs
    output/train/        a complete cache output (its own h5pipe-manifest.json, verify-able)
    output/validation/   the same for the validation rows (only with val_size)
    output/h5pipe-splits.json   which splits exist, their rows and samples, seed, val_size, shuffle,
                                and how many blank lines of the inputs were left out (they hold no row)

A rerun that no longer writes a split (``val_size`` dropped) or writes splits into a folder
holding unsplit outputs is refused unless ``overwrite``, which removes them (flows/layouts.py).
"""

from __future__ import annotations

import json

from prefect.logging import get_run_logger

from flows.layouts import PREPARED, SPLITS_RECORD, retire_parts, stale_parts
from flows.params import CacheParams
from pipeline_core.commit.manifest import MANIFEST
from pipeline_core.stages.inputs import list_inputs
from pipeline_core.stages.splits import SplitOptions, prepare_splits
from pipeline_core.storage.fs import join_url, url_to_fs, write_bytes_atomic


def split_options(params: CacheParams) -> SplitOptions:
    """The core's split settings from the flow parameters."""
    return SplitOptions(params.val_size, params.seed, params.shuffle, params.shuffle_bucket_bytes)


def run_splits(params: CacheParams, storage: dict, cache_run) -> dict:
    """Prepare the split shards, run ``cache_run`` per split, remove what an earlier run wrote that
    this one does not (flows/layouts.py: refused unless ``overwrite``), and record the splits."""
    stale = stale_parts(params, storage)
    inputs = [u for u in list_inputs(params.input, storage) if not u.endswith(".errors.jsonl")][: params.limit]
    prepared = prepare_splits(inputs, join_url(params.output, PREPARED), split_options(params), storage)
    results = {}
    for split, shards in prepared.shards.items():
        update = {"input": shards, "output": join_url(params.output, split), "val_size": None, "shuffle": False}
        results[split] = cache_run(params.model_copy(update={**update, "limit": None}))
    record = {
        "val_size": params.val_size,
        "seed": params.seed,
        "shuffle": params.shuffle,
        "blank_lines_left_out": prepared.blank_lines,
        "splits": {
            split: {
                "folder": split,
                "manifest": f"{split}/{MANIFEST}",
                "rows": prepared.rows[split],
                "samples": result["summary"].get("samples_written"),
                "chunks": len(prepared.shards[split]),
            }
            for split, result in results.items()
        },
    }
    if retired := retire_parts(params, stale, storage):
        get_run_logger().info(
            "removed %d file(s) an earlier run wrote that this one does not: %s", len(retired), retired[:5]
        )
    fs, root = url_to_fs(params.output, storage)
    fs.makedirs(root, exist_ok=True)
    write_bytes_atomic(join_url(params.output, SPLITS_RECORD), json.dumps(record, indent=2).encode(), storage)
    return {"summary": record, "splits": results}
