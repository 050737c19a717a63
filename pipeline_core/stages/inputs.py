"""Which JSONL files the cache stage reads: a file, a list, or a folder (its committed chunks)."""

from __future__ import annotations

from pipeline_core.commit.manifest import committed_outputs
from pipeline_core.storage.fs import fetch_files, url_to_fs


def list_inputs(inputs, storage_options: dict | None = None) -> list[str]:
    """A file, a list of files, or a folder of ``.jsonl`` files -> list of URLs.

    A folder with an h5pipe manifest (an export's output) gives exactly the chunks it committed;
    a folder without one gives its ``.jsonl`` files except hidden and temporary names (``.*``,
    ``_*``: staging files of writers, markers), as Hadoop's input formats skip them."""
    if isinstance(inputs, (list, tuple)):
        return [str(i) for i in inputs]
    fs, path = url_to_fs(str(inputs), storage_options)
    if fs.isdir(path):
        found = _folder_inputs(str(inputs), storage_options)
        if not found:
            raise FileNotFoundError(f"no .jsonl files in {inputs}")
        return found
    if not fs.exists(path):
        raise FileNotFoundError(f"input {inputs} does not exist")
    return [str(inputs)]


def _folder_inputs(folder: str, storage_options: dict | None) -> list[str]:
    listed = fetch_files(folder, ".jsonl", storage_options)
    committed = committed_outputs(folder, ".jsonl", storage_options)
    if committed is None:
        return [u for u in listed if not u.rsplit("/", 1)[-1].startswith((".", "_"))]
    by_name = {u.rsplit("/", 1)[-1]: u for u in listed}
    missing = [n for n in committed if n not in by_name]
    if missing:
        raise FileNotFoundError(
            f"{folder}: its manifest commits {missing[:3]} but the folder lacks them; rerun the export into it"
        )
    return [by_name[n] for n in committed]
