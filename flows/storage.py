"""Where Prefect keeps task results: beside the outputs, so the cache follows the data.

Results go to ``{output}/.h5pipe/results`` on the same filesystem as the outputs. Results are
JSON descriptors (paths, counts, hashes), never tensors or pickled objects.

Prefect needs remote result storage as a saved block, and a saved block is stored by the
Prefect server. So the block for an S3 output holds only non-secret settings (endpoint,
profile, timeouts): credentials come from the environment or the profile, as s3fs reads them.
When credentials are given explicitly (key/secret parameters), results stay on local disk
under ``~/.h5pipe/results/<hash of the output URL>`` rather than sending the secret to the server.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

from pipeline_core.storage.fs import join_url, protocol_prefix

RESULTS_DIR = ".h5pipe/results"
SECRET_OPTIONS = {"key", "secret", "token", "session_token", "aws_secret_access_key", "aws_access_key_id"}


def result_storage_for(output_dir: str, storage_options: dict | None = None, override: str | None = None):
    if override:
        return Path(override) if protocol_prefix(override) == "" else override
    location = join_url(output_dir, RESULTS_DIR)
    if protocol_prefix(output_dir) in ("", "file://"):
        return Path(location.removeprefix("file://")).absolute()
    options = storage_options or {}
    if SECRET_OPTIONS & set(options):
        digest = hashlib.sha256(output_dir.encode()).hexdigest()[:16]
        return Path.home() / ".h5pipe" / "results" / digest
    return _saved_remote_block(location, options)


def _saved_remote_block(basepath: str, options: dict):
    from prefect.filesystems import RemoteFileSystem

    block = RemoteFileSystem(basepath=basepath, settings=dict(options))
    name = "h5pipe-results-" + hashlib.sha256(f"{basepath}|{sorted(options.items())}".encode()).hexdigest()[:16]
    block.save(name, overwrite=True)
    return block
