"""``open_source``: anything the export stage accepts -> a ``Source``.

Accepted: a ``Source``; a ``datasets.Dataset`` / ``DatasetDict`` / ``IterableDataset``; a list of
row dicts; a path, glob or fsspec URL of data files (see ``detect``); a dataset repository folder
or hub id (``datasets.load_dataset``); a ``save_to_disk`` folder; a dataset_info YAML/JSON (several
datasets, mixed; recognised by its content, or forced with ``dataset_info=True``). Of a dataset_info
only the ``datasets`` selected are parsed and opened; the others h5pipe cannot load are logged
with the reason, never fatal. ``streaming=True`` reads through ``IterableDataset`` and never materialises the
data (a ``Dataset`` given with ``streaming=True`` is read as a stream too).
"""

from __future__ import annotations

import logging
import os
import posixpath
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pipeline_core.errors import ConfigError
from pipeline_core.sources.base import Source
from pipeline_core.sources.convert import ConverterSpec, converter_label, resolve_converter
from pipeline_core.sources.dataset_info import DatasetEntry, load_dataset_info
from pipeline_core.sources.detect import Location, locate
from pipeline_core.sources.fingerprint import digest, files_fingerprint, rows_fingerprint, tree_fingerprint
from pipeline_core.sources.limit import LimitedSource
from pipeline_core.sources.load import hub_revision, load_files, load_repo, load_saved, pick_split
from pipeline_core.sources.mixture import MixtureSource, Part
from pipeline_core.sources.remote import local_copies
from pipeline_core.sources.single import DatasetSource

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class SourceOptions:
    split: str = "train"
    streaming: bool = False
    storage_options: dict | None = None
    seed: int = 0
    converter: ConverterSpec = None  # single sources; dataset_info entries name their own
    name: str | None = None  # the dataset's name in counts, errors and ``_source``
    subset: str | None = None  # a hub dataset's config name
    datasets: Sequence[str] | None = None  # dataset_info only: the entries to use (default all)
    total: int | None = None  # dataset_info only: rows in the mixed output (default: see mixing)
    dataset_dir: str | None = None  # dataset_info only: the folder relative names resolve against
    dataset_info: bool | None = None  # a file is a dataset_info: None by its content, True/False forced
    limit: int | None = None  # only the first rows (a trial run)

    def __post_init__(self) -> None:
        if isinstance(self.seed, bool) or not isinstance(self.seed, int) or self.seed < 0:
            raise ConfigError(f"seed must be a non-negative integer, got {self.seed!r}")
        if self.total is not None and (
            isinstance(self.total, bool) or not isinstance(self.total, int) or self.total < 1
        ):
            raise ConfigError(f"total must be a positive number of rows, got {self.total!r}")
        if self.limit is not None and (
            isinstance(self.limit, bool) or not isinstance(self.limit, int) or self.limit < 1
        ):
            raise ConfigError(f"limit must be a positive number of rows, got {self.limit!r}")
        if isinstance(self.datasets, str):
            raise ConfigError(f"datasets must be a list of dataset names, got the string {self.datasets!r}")


def open_source(
    source,
    *,
    split: str = "train",
    streaming: bool = False,
    storage_options: dict | None = None,
    seed: int = 0,
    converter: ConverterSpec = None,
    name: str | None = None,
    subset: str | None = None,
    datasets: Sequence[str] | None = None,
    total: int | None = None,
    dataset_dir: str | None = None,
    dataset_info: bool | None = None,
    limit: int | None = None,
) -> Source:
    """A ``Source`` for ``source``; the options are those of ``SourceOptions``."""
    opts = SourceOptions(
        split, streaming, storage_options, seed, converter, name, subset, datasets, total, dataset_dir, dataset_info
    )
    if limit is not None:
        SourceOptions(limit=limit)  # checked
        return LimitedSource(_open(source, opts, storage_options, dataset_info), limit)
    return _open(source, opts, storage_options, dataset_info)


def _open(source, opts: SourceOptions, storage_options: dict | None, dataset_info: bool | None) -> Source:
    if isinstance(source, (DatasetSource, MixtureSource, LimitedSource)):
        if opts != SourceOptions(storage_options=storage_options):
            raise ConfigError("options apply when a source is opened; pass them to open_source, not with a Source")
        return source
    if isinstance(source, (list, tuple)):
        return _open_rows(list(source), opts)
    if isinstance(source, (str, os.PathLike)):
        return open_location(locate(source, storage_options, dataset_info), opts)
    return _open_hf(source, opts)


def open_location(location: Location, opts: SourceOptions) -> Source:
    if location.kind == "dataset_info":
        return _open_dataset_info(location.target, opts)
    _only_for_dataset_info(opts)
    if location.kind == "files" and opts.split != "train":
        raise ConfigError(f"split={opts.split!r} only applies to dataset repositories; {location.target} is data files")
    converter = resolve_converter(opts.converter)  # a bad converter fails before any data is read
    data, fingerprint = _LOADERS[location.kind](location, opts)
    return _dataset_source(data, opts.name or _default_name(location), fingerprint, converter)


Loaded = tuple[object, Callable[[], str]]  # the data and how to fingerprint it


def _load_files(location: Location, opts: SourceOptions) -> Loaded:
    so = opts.storage_options
    files = location.files if opts.streaming else local_copies(location.files, so)
    data = load_files(files, location.builder, streaming=opts.streaming, storage_options=so)
    # CSV cells are read as text since 2026-12-06 (load.csv_options): other rows than before, another
    # key; since 2026-12-07 also after blank lines before the header ("header_after_blank_lines")
    read_as = ["cells_as_text", "header_after_blank_lines"] if location.builder == "csv" else []
    return data, lambda: digest("files", location.builder, *read_as, files_fingerprint(files, so))


def _load_repo(location: Location, opts: SourceOptions) -> Loaded:
    data = load_repo(
        location.target,
        subset=opts.subset,
        split=opts.split,
        streaming=opts.streaming,
        storage_options=opts.storage_options,
    )
    return data, lambda: digest("repo", tree_fingerprint(location.target), opts.subset, opts.split)


def _load_saved(location: Location, opts: SourceOptions) -> Loaded:
    data = load_saved(location.target, split=opts.split, streaming=opts.streaming)
    return data, lambda: digest("saved", tree_fingerprint(location.target), opts.split)


def _load_hub(location: Location, opts: SourceOptions) -> Loaded:
    data, _ = _load_repo(location, opts)
    if hasattr(data, "__len__"):  # materialised: datasets' own fingerprint follows the downloaded files
        return data, lambda: digest("hub", data._fingerprint)
    return data, lambda: digest("hub", location.target, hub_revision(location.target), opts.subset, opts.split)


_LOADERS: dict[str, Callable[[Location, SourceOptions], Loaded]] = {
    "files": _load_files,
    "repo": _load_repo,
    "saved": _load_saved,
    "hub": _load_hub,
}


def _dataset_source(data, name: str, fingerprint: Callable[[], str], converter) -> DatasetSource:
    label = converter_label(converter)
    return DatasetSource(data, name=name, converter=converter, fingerprint=lambda: digest(fingerprint(), label))


def _open_hf(data, opts: SourceOptions) -> DatasetSource:
    from datasets import Dataset, DatasetDict, IterableDataset, IterableDatasetDict

    if not isinstance(data, (Dataset, DatasetDict, IterableDataset, IterableDatasetDict)):
        raise TypeError(
            f"cannot read rows from a {type(data).__name__}; pass a datasets.Dataset/IterableDataset, a list of "
            "dicts, a path, URL or hub id, or a dataset_info YAML"
        )
    _only_for_dataset_info(opts)
    data = pick_split(data, opts.split, "the DatasetDict")
    if isinstance(data, Dataset):
        data = shown_columns(data)
        base = data._fingerprint
        fingerprint = lambda: digest("dataset", base)  # noqa: E731
        data = data.to_iterable_dataset() if opts.streaming and len(data) else data  # (datasets cannot stream 0 rows)
    else:
        fingerprint = lambda: digest("rows", rows_fingerprint(data))  # noqa: E731
    return _dataset_source(data, opts.name or "dataset", fingerprint, resolve_converter(opts.converter))


def shown_columns(data):
    """The dataset limited to the columns ``dataset[i]`` shows: those ``set_format(columns=...)``
    chose (unless ``output_all_columns``), else all of them. Arrow reads ignore the format."""
    shown = data.format.get("columns")
    if shown is None or data.format.get("output_all_columns"):
        return data
    return data.select_columns(list(shown))


def _open_rows(rows: list, opts: SourceOptions) -> DatasetSource:
    if rows and not isinstance(rows[0], dict):
        raise TypeError(
            f"a list source must hold row dicts, got a {type(rows[0]).__name__}; for files pass a folder or glob"
        )
    _only_for_dataset_info(opts)
    fingerprint = lambda: digest("rows", rows_fingerprint(rows))  # noqa: E731
    return _dataset_source(rows, opts.name or "rows", fingerprint, resolve_converter(opts.converter))


def _open_dataset_info(url: str, opts: SourceOptions) -> MixtureSource:
    for key, default in (("converter", None), ("subset", None), ("split", "train")):
        if getattr(opts, key) != default:
            raise ConfigError(f"{key} is set per dataset in a dataset_info file; remove {key}={getattr(opts, key)!r}")
    entries, unusable = selected_entries(url, opts.storage_options, opts.datasets, opts.dataset_dir)
    for other, reason in unusable.items():
        log.info("dataset_info %s: entry %r is not selected and could not be loaded: %s", url, other, reason)
    parts = [Part(entry, _open_entry(entry, opts)) for entry in entries]
    name = opts.name or posixpath.splitext(posixpath.basename(str(url)))[0]
    source = MixtureSource(parts, name=name, seed=opts.seed, total=opts.total)
    source.not_loadable = unusable  # unselected entries h5pipe could not load, with the reason
    return source


def selected_entries(
    url: str, storage_options: dict | None, datasets: Sequence[str] | None, dataset_dir: str | None
) -> tuple[list[DatasetEntry], dict[str, str]]:
    """The entries of the dataset_info at ``url`` a run uses (``datasets``, default all), parsed,
    and the unselected ones h5pipe could not load with the reason. A selected entry that cannot
    be loaded, or with no selection any entry, is a ``ConfigError``."""
    info = load_dataset_info(url, storage_options, dataset_dir)
    unusable = {} if datasets is None else info.unusable(skip=datasets)
    if datasets is None:
        _all_usable(info)
    return info.entries(datasets), unusable


def _all_usable(info) -> None:
    """With no selection every entry is used: name all those that cannot be, and how to leave them out."""
    bad = info.unusable()
    if len(bad) > 1 or (bad and len(info.names) > 1):
        lines = "\n".join(f"  {reason}" for reason in bad.values())
        usable = [n for n in info.names if n not in bad]
        raise ConfigError(
            f"{info.where}: {len(bad)} of {len(info.names)} entries cannot be loaded:\n{lines}\n"
            f"select the datasets to use (datasets: [...] or --dataset a,b), e.g. from {usable}"
        )


def _open_entry(entry: DatasetEntry, opts: SourceOptions) -> DatasetSource:
    location = Location("hub", entry.location) if entry.hub else locate(entry.location, opts.storage_options)
    if location.kind == "dataset_info":
        raise ConfigError(
            f"dataset {entry.name!r} points at another dataset_info file ({entry.location}); list its entries instead"
        )
    entry_opts = SourceOptions(
        split=entry.split,
        streaming=opts.streaming or entry.streaming,
        storage_options=opts.storage_options,
        seed=opts.seed,
        converter=entry.converter,
        name=entry.name,
        subset=entry.subset,
    )
    source = open_location(location, entry_opts)
    _check_named_columns(entry, source)
    return source


def _check_named_columns(entry: DatasetEntry, source) -> None:
    """A column the entry's ``columns`` names must be one of the data's (LLaMA-Factory fails with a
    KeyError; read as missing, a misspelt ``system`` or ``images`` would leave every row without
    it). Data whose columns are not known before reading (streamed JSON) is not checked here."""
    features = getattr(getattr(source, "data", None), "features", None)
    if not features:
        return
    missing = [(role, column) for role, column in entry.named_columns if column not in features]
    if missing:
        named = ", ".join(f"columns.{role} = {column!r}" for role, column in missing)
        raise ConfigError(
            f"dataset {entry.name!r}: {named} not in {entry.location} (its columns: {sorted(features)}); "
            "fix the name in the dataset_info entry, or remove it"
        )


def _only_for_dataset_info(opts: SourceOptions) -> None:
    for key in ("datasets", "total", "dataset_dir"):
        if getattr(opts, key) is not None:
            raise ConfigError(f"{key} only applies to a dataset_info source (several datasets); remove {key}=")


def _default_name(location: Location) -> str:
    if location.kind == "hub":
        return location.target
    base = posixpath.basename(location.target.rstrip("/").replace(os.sep, "/"))
    return posixpath.splitext(base)[0] if location.kind == "files" and len(location.files) == 1 else base
