"""``h5pipe-run.json``: the resolved configuration saved beside the outputs (secrets masked)."""

from __future__ import annotations

import json
from datetime import datetime, timezone

from pipeline_core.storage.fs import join_url, write_bytes_atomic
from pipeline_core.version import FORMAT_VERSION

RUN_RECORD = "h5pipe-run.json"


def save_run_record(
    output_dir: str, stage: str, config: dict, summary: dict, storage_options: dict | None, **extra
) -> str:
    record = {
        "stage": stage,
        "format_version": FORMAT_VERSION,
        "finished_at": datetime.now(timezone.utc).isoformat(),
        "config": config,
        "summary": summary,
        **extra,
    }
    url = join_url(output_dir, RUN_RECORD)
    write_bytes_atomic(url, json.dumps(record, indent=2, sort_keys=True, default=str).encode("utf-8"), storage_options)
    return url
