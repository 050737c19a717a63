"""dataset_info files: several datasets in one run (LLaMA-Factory v1 YAML or v0 JSON).

The file maps a dataset name to an entry:

- where: ``file_name`` (a file, folder, glob or URL; relative names resolve against the
  dataset_info's own folder), ``cloud_file_name`` (a URL), ``hf_hub_url`` (a hub id), or v1's
  ``path`` with ``source: local|hf`` (default local). ``subset`` picks a hub config, ``split`` a
  split (default ``train``).
- conversion: v1's ``converter`` or v0's ``formatting``/``columns``/``tags``/``ranking`` (see
  ``converters.dataset_info``). An entry with none of them is alpaca in a JSON file (as in
  LLaMA-Factory v0) and passes through unchanged in a YAML file (v1: already standard samples).
- sampling: ``size``, ``shuffle``, ``weight``, ``streaming`` (see ``sources.mixing``).

Unknown keys are errors. ``ms_hub_url``/``om_hub_url``/``script_url`` are ignored beside a
supported location and an error on their own.
"""

from __future__ import annotations

import json
import os
import posixpath
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import yaml

from pipeline_core.converters import ConverterFactory, converter_spec
from pipeline_core.errors import ConfigError
from pipeline_core.storage.fs import url_to_fs

LOCATION_KEYS = ("file_name", "cloud_file_name", "hf_hub_url", "path")
CONVERTER_KEYS = ("converter", "formatting", "columns", "tags", "ranking")
OTHER_KEYS = ("source", "split", "subset", "size", "weight", "shuffle", "streaming")
OTHER_HUBS = ("ms_hub_url", "om_hub_url", "script_url")
KNOWN_KEYS = frozenset(LOCATION_KEYS + CONVERTER_KEYS + OTHER_KEYS + OTHER_HUBS)


@dataclass(frozen=True, slots=True)
class DatasetEntry:
    name: str
    location: str  # a local path or URL (hub=False), or what to hand to datasets.load_dataset (hub=True)
    hub: bool = False
    converter: tuple[str, dict[str, Any]] | None = None
    split: str = "train"
    subset: str | None = None
    size: int | None = None
    weight: float | None = None
    shuffle: bool = False
    streaming: bool = False


def read_dataset_info(url: str, storage_options: dict | None = None) -> list[DatasetEntry]:
    fs, path = url_to_fs(url, storage_options)
    with fs.open(path, "rt", encoding="utf-8") as f:
        text = f.read()
    is_json = path.lower().endswith(".json")
    try:
        data = json.loads(text) if is_json else yaml.safe_load(text)
    except (ValueError, yaml.YAMLError) as exc:
        raise ConfigError(f"cannot parse dataset_info {url}: {exc}") from None
    base = posixpath.dirname(url) if "://" in url else os.path.dirname(os.path.abspath(url))
    return parse_dataset_info(data, base, v0_default=is_json, where=url)


def parse_dataset_info(data: Any, base: str, *, v0_default: bool, where: str = "dataset_info") -> list[DatasetEntry]:
    if not isinstance(data, Mapping) or not data:
        raise ConfigError(f"{where} must map dataset names to entries, got {type(data).__name__}: {data!r:.80}")
    return [parse_entry(str(name), raw, base, v0_default) for name, raw in data.items()]


def select(entries: Sequence[DatasetEntry], names: Sequence[str] | None) -> list[DatasetEntry]:
    """The entries named (in that order), or all of them."""
    if names is None:
        return list(entries)
    by_name = {e.name: e for e in entries}
    missing = [n for n in names if n not in by_name]
    if missing:
        raise ConfigError(f"datasets {missing} are not in the dataset_info; available: {sorted(by_name)}")
    return [by_name[n] for n in names]


def parse_entry(name: str, raw: Any, base: str, v0_default: bool) -> DatasetEntry:
    if not isinstance(raw, Mapping):
        raise ConfigError(f"dataset {name!r}: an entry must be a mapping, got {raw!r:.80}")
    unknown = sorted(set(raw) - KNOWN_KEYS)
    if unknown:
        raise ConfigError(f"dataset {name!r}: unknown keys {unknown}; known keys: {sorted(KNOWN_KEYS)}")
    location, hub = _location(name, raw, base)
    return DatasetEntry(
        name=name,
        location=location,
        hub=hub,
        converter=_converter(name, raw, v0_default),
        split=_text(name, raw, "split") or "train",
        subset=_text(name, raw, "subset"),
        size=_size(name, raw.get("size")),
        weight=_weight(name, raw.get("weight")),
        shuffle=_flag(name, raw, "shuffle"),
        streaming=_flag(name, raw, "streaming"),
    )


def _location(name: str, raw: Mapping, base: str) -> tuple[str, bool]:
    given = [k for k in LOCATION_KEYS if raw.get(k)]
    if len(given) != 1:
        others = [k for k in OTHER_HUBS if raw.get(k)]
        hint = f" ({others} are not supported)" if others else ""
        raise ConfigError(
            f"dataset {name!r} needs exactly one of file_name, cloud_file_name, hf_hub_url or path "
            f"(with source: local|hf), got {given}{hint}"
        )
    key, value = given[0], raw[given[0]]
    if not isinstance(value, str):
        raise ConfigError(f"dataset {name!r}: {key} must be a string, got {value!r}")
    source = raw.get("source", "local" if key == "path" else None)
    if "source" in raw and key != "path":
        raise ConfigError(f"dataset {name!r}: source goes with path; with {key} remove source")
    if source not in (None, "local", "hf"):
        raise ConfigError(f"dataset {name!r}: source must be 'local' or 'hf', got {source!r}")
    if key == "hf_hub_url" or source == "hf":
        return value, True
    return resolve(base, value), False


def resolve(base: str, name: str) -> str:
    """``name`` relative to the dataset_info's folder ``base`` (URLs and absolute paths as is)."""
    if "://" in name or os.path.isabs(name):
        return name
    return posixpath.join(base, name) if "://" in base else os.path.join(base, name)


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
    return float(value)


def _flag(name: str, raw: Mapping, key: str) -> bool:
    value = raw.get(key, False)
    if not isinstance(value, bool):
        raise ConfigError(f"dataset {name!r}: {key} must be true or false, got {value!r}")
    return value
