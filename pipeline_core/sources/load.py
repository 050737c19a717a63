"""Reading with ``datasets``: data files, dataset repositories (local folder or hub) and saved datasets.

``trust_remote_code`` is never passed: ``datasets`` >= 4 runs no loading scripts, so a repository
is read from its data files and its README ``configs`` only.
"""

from __future__ import annotations

import os
from collections.abc import Sequence

from pipeline_core.errors import SourceError
from pipeline_core.sources.json_lines import DiagnosedStream, diagnosed, unreadable


def load_files(files: Sequence[str], builder: str, *, streaming: bool, storage_options: dict | None):
    from datasets import load_dataset

    options = csv_options(files[0], storage_options) if builder == "csv" and files else {}
    try:
        data = load_dataset(
            builder,
            data_files=list(files),
            split="train",
            streaming=streaming,
            storage_options=_copy(storage_options),
            **options,
        )
    except Exception as e:  # datasets wraps a JSON parse error without its line: find it
        where = diagnosed(e, files, storage_options) if builder == "json" else None
        if where is None:
            raise
        raise unreadable(where) from e
    return DiagnosedStream(data, files, storage_options) if streaming and builder == "json" else data


def csv_options(first: str, storage_options: dict | None) -> dict:
    """Every CSV cell as the text it is: pandas' defaults read ``NA``, ``null``, ``nan`` and empty
    cells as missing and ``02134`` as the number 2134.0, so the columns of the header are read as
    strings (``features``) with no missing-value detection (``na_filter=False``)."""
    import csv

    import fsspec
    from datasets import Features, Value

    with fsspec.open(
        first, "rt", encoding="utf-8-sig", newline="", compression="infer", **(storage_options or {})
    ) as f:
        header = next((row for row in csv.reader(f) if not _blank_line(row)), None)
    if not header:  # no rows at all
        return {"na_filter": False}
    if "" in header:
        raise SourceError(
            f"{first}: the CSV header has no name for column {header.index('') + 1} of {len(header)}: "
            "give every column a name"
        )
    repeated = sorted({name for name in header if header.count(name) > 1})
    if repeated:
        raise SourceError(
            f"{first}: the CSV header repeats the column name(s) {repeated}; pandas would rename them "
            "(name.1, ...) and read their cells as numbers: give every column its own name"
        )
    return {"na_filter": False, "features": Features({name: Value("string") for name in header})}


def _blank_line(row: list[str]) -> bool:
    """A line pandas skips before the header: empty, or only spaces and tabs (no delimiter)."""
    return not row or (len(row) == 1 and not row[0].strip(" \t"))


def load_repo(path: str, *, subset: str | None, split: str, streaming: bool, storage_options: dict | None):
    """A hub id or a local repository folder, like ``datasets.load_dataset(path, subset, split=...)``.
    A local folder's data is read again on every load: ``datasets`` keyed its Arrow cache of such a
    folder so that files edited in place kept their old rows."""
    from datasets import load_dataset

    fresh = {"download_mode": "force_redownload"} if not streaming and os.path.isdir(path) else {}
    return load_dataset(path, subset, split=split, streaming=streaming, storage_options=_copy(storage_options), **fresh)


def load_saved(path: str, *, split: str, streaming: bool):
    """A folder written by ``save_to_disk`` (a Dataset, or a DatasetDict from which ``split`` is taken)."""
    from datasets import load_from_disk

    dataset = pick_split(load_from_disk(path), split, path)
    return dataset.to_iterable_dataset() if streaming else dataset


def pick_split(data, split: str, where: str):
    """``data[split]`` for a DatasetDict / IterableDatasetDict; other data as is."""
    from datasets import DatasetDict, IterableDatasetDict

    if not isinstance(data, (DatasetDict, IterableDatasetDict)):
        return data
    if split not in data:
        raise ValueError(f"{where} has no split {split!r}; available splits: {sorted(data)}; pass split=...")
    return data[split]


def _copy(storage_options: dict | None) -> dict | None:
    """datasets adds keys to the storage_options it is given; keep the caller's (and fsspec's) intact."""
    return dict(storage_options) if storage_options else None


def hub_revision(repo_id: str) -> str:
    """The commit a hub dataset currently resolves to (one metadata request)."""
    from huggingface_hub import HfApi

    return HfApi().dataset_info(repo_id).sha
