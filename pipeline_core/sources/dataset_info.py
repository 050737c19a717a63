"""dataset_info files: several datasets in one run (LLaMA-Factory v1 YAML or v0 JSON).

The file maps a dataset name to an entry. Entries are parsed only when they are used: selecting
some (``datasets=[...]``) never fails on another entry h5pipe cannot load (``DatasetInfo.unusable``
lists those with the reason); a selected entry that cannot be loaded is a ``ConfigError``.

- where, files: ``file_name`` (a file, folder, glob or URL) and ``cloud_file_name`` (a URL); a
  relative ``file_name`` resolves against ``dataset_dir`` as LLaMA-Factory v0 does: the entry's own
  ``dataset_dir``, else the caller's, else the dataset_info's folder (where v0 keeps it).
- where, v1: ``path`` with ``source: hf_hub|ms_hub|om_hub|local`` (default ``hf_hub``, as in v1;
  ``hf`` is kept as another name for ``hf_hub``). A relative local ``path`` resolves against
  ``dataset_dir`` when one is given, else the working directory, as v1 hands it to ``datasets``
  unchanged (a dataset_info on a URL: its own folder).
- where, hubs: ``hf_hub_url``, ``ms_hub_url`` (ModelScope), ``om_hub_url`` (Modelers). As in v0 a hub
  URL is chosen over the others: ModelScope when ``USE_MODELSCOPE_HUB`` is set or there is no
  ``hf_hub_url``, Modelers likewise with ``USE_OPENMIND_HUB``. ModelScope and Modelers are refused
  (h5pipe reads the Hugging Face hub and files), as are ``script_url``, ``folder`` and ``num_samples``.
- ``subset`` picks a hub config, ``split`` a split (default ``train``).
- conversion: v1's ``converter`` or v0's ``formatting``/``columns``/``tags``/``ranking`` (see
  ``converters.dataset_info``). An entry with none of them is alpaca in a JSON file (as in
  LLaMA-Factory v0) and passes through unchanged in a YAML file (v1: already standard samples).
- sampling: ``size``, ``shuffle``, ``weight``, ``streaming``. As in LLaMA-Factory v1 a dataset
  gives int(size (else its rows) x weight (else 1)) rows, each dataset on its own (see
  ``sources.mixing``).

Unknown keys are errors (of the entry, when it is used).
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import yaml

from pipeline_core.converters import ConverterFactory, converter_spec
from pipeline_core.errors import ConfigError
from pipeline_core.sources.locations import LOCATION_KEYS, Resolver, entry_location
from pipeline_core.storage.fs import url_to_fs

CONVERTER_KEYS = ("converter", "formatting", "columns", "tags", "ranking")
OTHER_KEYS = ("source", "split", "subset", "size", "weight", "shuffle", "streaming", "dataset_dir")
REFUSED_KEYS = {
    "folder": "h5pipe does not read a hub repository's sub-folder; download it and point file_name at the folder",
    "num_samples": "h5pipe samples with size (and shuffle: true for a seeded sample); use those instead",
}
KNOWN_KEYS = frozenset(LOCATION_KEYS + CONVERTER_KEYS + OTHER_KEYS + tuple(REFUSED_KEYS))
YAML_SUFFIXES = (".yaml", ".yml")


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    """One parsed entry: where its rows are, how they convert, and how they are sampled."""

    name: str
    location: str  # a local path or URL (hub=False), or what to hand to datasets.load_dataset (hub=True)
    hub: bool = False
    converter: tuple[str, dict[str, Any]] | None = None
    split: str = "train"
    subset: str | None = None
    size: int | None = None  # rows to give before weight; may exceed the data's rows (then some repeat)
    weight: float | None = None  # multiplies the rows it gives; as written (an int stays an int, as in LF)
    shuffle: bool = False
    streaming: bool = False
    named_columns: tuple[tuple[str, str], ...] = ()  # (role, column) the entry's "columns" names


@dataclass(frozen=True, slots=True)
class DatasetInfo:
    """A dataset_info file read but not yet parsed: ``entries`` parses only the entries asked for.

    ``folder`` is the file's own folder, ``dataset_dir`` the caller's (None: see the module doc),
    ``v0_default`` whether entries without a converter are alpaca (a JSON file).
    """

    raw: Mapping[str, Any]
    folder: str
    v0_default: bool
    where: str = "dataset_info"
    dataset_dir: str | None = None
    env: Mapping[str, str] = field(default_factory=dict)

    @property
    def names(self) -> list[str]:
        """Every entry's name, in file order."""
        return [str(n) for n in self.raw]

    def entry(self, name: str) -> DatasetEntry:
        """The entry ``name``, parsed; a ``ConfigError`` naming it when h5pipe cannot load it."""
        return parse_entry(name, self.raw[name], self._resolver(name), self.v0_default, self.env)

    def entries(self, names: Sequence[str] | None = None) -> list[DatasetEntry]:
        """The entries named (in that order), or all of them; only these are parsed."""
        if names is None:
            return [self.entry(n) for n in self.names]
        missing = [n for n in names if n not in self.raw]
        if missing:
            raise ConfigError(
                f"datasets {missing} are not in the dataset_info; available: {sorted(self.names)} (in {self.where})"
            )
        return [self.entry(n) for n in names]

    def unusable(self, skip: Sequence[str] = ()) -> dict[str, str]:
        """The entries (but those in ``skip``) h5pipe could not load, each with the reason."""
        found = {}
        for name in self.names:
            if name not in skip:
                try:
                    self.entry(name)
                except ConfigError as exc:
                    found[name] = str(exc)
        return found

    def _resolver(self, name: str) -> Resolver:
        own = self.raw[name].get("dataset_dir") if isinstance(self.raw[name], Mapping) else None
        if own is not None and not isinstance(own, str):
            raise ConfigError(f"dataset {name!r}: dataset_dir must be a folder path, got {own!r}")
        if own and "://" not in own:
            own = os.path.abspath(os.path.expanduser(own))
        return Resolver(self.folder, own or self.dataset_dir)


def read_dataset_info(url: str, storage_options: dict | None = None) -> list[DatasetEntry]:
    """Every entry of the dataset_info at ``url``, parsed (the first bad one raises)."""
    return load_dataset_info(url, storage_options).entries()


def load_dataset_info(url: str, storage_options: dict | None = None, dataset_dir: str | None = None) -> DatasetInfo:
    """The dataset_info at ``url`` (JSON or YAML by its text), its entries left unparsed."""
    fs, path = url_to_fs(url, storage_options)
    with fs.open(path, "rt", encoding="utf-8-sig") as f:  # a byte order mark (Windows editors) is dropped
        text = f.read()
    is_json = not path.lower().endswith(YAML_SUFFIXES) and text.lstrip().startswith("{")
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot parse dataset_info {url}: {exc}") from None
    folder = posixpath.dirname(url) if "://" in url else os.path.dirname(os.path.abspath(url))
    return dataset_info(data, folder, v0_default=is_json, where=url, dataset_dir=dataset_dir)


def dataset_info(
    data: Any, folder: str, *, v0_default: bool, where: str = "dataset_info", dataset_dir: str | None = None
) -> DatasetInfo:
    """``data`` (a parsed file) as a ``DatasetInfo``; only its shape is checked here."""
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{where} must map dataset names to entries, got {type(data).__name__}: {data!r:.80}")
    env = {k: os.environ[k] for k in ("USE_MODELSCOPE_HUB", "USE_OPENMIND_HUB") if k in os.environ}
    if dataset_dir and "://" not in dataset_dir:
        dataset_dir = os.path.abspath(os.path.expanduser(dataset_dir))
    return DatasetInfo(data, folder, v0_default, where, dataset_dir, env)


def parse_dataset_info(data: Any, base: str, *, v0_default: bool, where: str = "dataset_info") -> list[DatasetEntry]:
    """Every entry of ``data``, parsed, names relative to ``base``."""
    return dataset_info(data, base, v0_default=v0_default, where=where).entries()


def select(entries: Sequence[DatasetEntry], names: Sequence[str] | None) -> list[DatasetEntry]:
    """The entries named (in that order), or all of them."""
    if names is None:
        return list(entries)
    by_name = {e.name: e for e in entries}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ConfigError(f"datasets {missing} are not in the dataset_info; available: {sorted(by_name)}")
    return [by_name[n] for n in names]


def parse_entry(
    name: str, raw: Any, resolver: Resolver | str, v0_default: bool, env: Mapping[str, str] | None = None
) -> DatasetEntry:
    """One entry, checked field by field (``resolver`` may be a plain base folder)."""
    if not isinstance(raw, Mapping):
        raise ConfigError(f"dataset {name!r}: an entry must be a mapping, got {raw!r:.80}")
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"dataset {name!r}: unknown keys {unknown}; known keys: {sorted(KNOWN_KEYS)}")
    for key, why in REFUSED_KEYS.items():
        if key in raw:
            raise ConfigError(f"dataset {name!r}: {key} is not supported: {why}")
    resolver = Resolver(resolver) if isinstance(resolver, str) else resolver
    location, hub = entry_location(name, raw, resolver, env or {})
    converter = _converter(name, raw, v0_default)
    return DatasetEntry(
        name=name,
        location=location,
        hub=hub,
        converter=converter,
        split=_text(name, raw, "split") or "train",
        subset=_text(name, raw, "subset"),
        size=_size(name, raw.get("size")),
        weight=_weight(name, raw.get("weight")),
        shuffle=_flag(name, raw, "shuffle"),
        streaming=_flag(name, raw, "streaming"),
        named_columns=_named_columns(raw, converter),
    )


def _named_columns(raw: Mapping, converter: tuple[str, dict[str, Any]] | None) -> tuple[tuple[str, str], ...]:
    """(role, column) the entry's ``columns`` names and its converter reads: LLaMA-Factory reads (and
    fails on) only the columns of its formatting, so a named role the formatting never reads (a
    sharegpt entry's ``history``) is not required of the data."""
    columns = raw.get("columns")
    if not isinstance(columns, Mapping) or converter is None:
        return ()
    built = ConverterFactory.create(converter[0], **converter[1])
    return tuple(
        (role, column) for role, column in columns.items() if isinstance(column, str) and _reads(built, role, column)
    )


def _reads(converter: Any, role: str, column: str) -> bool:
    """The converter reads ``column`` as ``role`` (a ``text`` converter reads one column, any role)."""
    return (
        getattr(getattr(converter, "columns", None), role, None) == column
        or getattr(converter, "column", None) == column
    )


def _converter(name: str, raw: Mapping, v0_default: bool) -> tuple[str, dict[str, Any]] | None:
    if not v0_default and not any(k in raw for k in CONVERTER_KEYS):
        return None
    try:
        spec = converter_spec({k: raw[k] for k in CONVERTER_KEYS if k in raw})
        ConverterFactory.create(spec[0], **spec[1])  # fail at configuration time, not on the first row
    except ConfigError as exc:
        raise ConfigError(f"dataset {name!r}: {exc}") from None
    return spec


def _text(name: str, raw: Mapping, key: str) -> str | None:
    value = raw.get(key)
    if value is not None and (not isinstance(value, str) or not value):
        raise ConfigError(f"dataset {name!r}: {key} must be a non-empty string, got {value!r}")
    return value


def _size(name: str, value: Any) -> int | None:
    if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
        raise ConfigError(f"dataset {name!r}: size must be a positive whole number of rows, got {value!r}")
    return value


def _weight(name: str, value: Any) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not 0 < value < float("inf"):
        raise ConfigError(
            f"dataset {name!r}: weight must be a positive number (drop the entry to leave it out), got {value!r}"
        )
    return value  # not float(value): int(rows * 3) must stay exact, as LLaMA-Factory computes it


def _flag(name: str, raw: Mapping, key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"dataset {name!r}: {key} must be true or false, got {value!r}")
    return value
