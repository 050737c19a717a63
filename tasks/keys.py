"""Cache keys built from what the output depends on, never from where the input lives."""

from __future__ import annotations

import hashlib
import json


def digest(material: dict) -> str:
    return hashlib.sha256(json.dumps(material, sort_keys=True, default=str).encode("utf-8")).hexdigest()


def cache_chunk_key(context, parameters: dict) -> str:
    """Prefect ``cache_key_fn`` of cache_chunk: content sha256 + tokenizer + settings + destination."""
    job, chunk = parameters["job"], parameters["chunk"]
    from pipeline_core.stages.outputs import output_names

    output_url, _ = output_names(chunk.url, job.output_dir)
    return "cache-" + digest(job.key_material(chunk.sha256, output_url))


def export_chunk_key(context, parameters: dict) -> str:
    """Prefect ``cache_key_fn`` of export_chunk: dataset fingerprint + chunking + process_func source."""
    job, index = parameters["job"], parameters["index"]
    material = {**job.settings(), "source": job.source_fingerprint, "index": index, "output_dir": job.output_dir}
    return "export-" + digest(material)


def export_stream_key(context, parameters: dict) -> str:
    job = parameters["job"]
    return "export-stream-" + digest({**job.settings(), "source": job.source_fingerprint, "output_dir": job.output_dir})
