"""Where a dataset_info entry's data is: the location keys (``file_name``, ``cloud_file_name``,
v1's ``path`` with ``source``, the hub URLs), the hub chosen as LLaMA-Factory v0 chooses it, and
relative names resolved against ``dataset_dir`` or the file's folder (sources/dataset_info.py's
docstring gives the rules).
"""

from __future__ import annotations

import os
import posixpath
from collections.abc import Mapping
from dataclasses import dataclass

from pipeline_core.errors import ConfigError

FILE_KEYS = ("file_name", "cloud_file_name", "path", "script_url")
HUB_KEYS = ("hf_hub_url", "ms_hub_url", "om_hub_url")
LOCATION_KEYS = FILE_KEYS + HUB_KEYS
SOURCES = ("hf_hub", "ms_hub", "om_hub", "local")
SOURCE_ALIASES = {"hf": "hf_hub"}
OTHER_HUBS = {
    "ms_hub": ("ModelScope", "modelscope download --dataset {id} --local_dir DIR"),
    "om_hub": ("Modelers (openmind)", "openmind-cli pull {id} --local_dir DIR"),
}


@dataclass(frozen=True, slots=True)
class Resolver:
    """Where relative names point: ``dataset_dir`` when given, else the file's ``folder`` for
    ``file_name`` and the working directory for a v1 ``path`` (a remote file: its folder)."""

    folder: str
    dataset_dir: str | None = None

    def file_name(self, name: str) -> str:
        """A v0 ``file_name``: relative to ``dataset_dir``, else the file's folder."""
        return resolve(self.dataset_dir or self.folder, name)

    def path(self, entry: str, name: str) -> str:
        """A v1 local ``path`` of entry ``entry``: relative to ``dataset_dir``, else the working
        directory; a ``ConfigError`` with the fix when nothing is there."""
        if self.dataset_dir or "://" in self.folder:
            return resolve(self.dataset_dir or self.folder, name)
        if "://" in name:
            return name
        if os.path.isabs(name) or os.path.exists(name):
            return os.path.abspath(name)  # workers in other folders read the same file
        beside = resolve(self.folder, name)
        hint = f"but {beside} exists; set dataset_dir: {self.folder}" if os.path.exists(beside) else "set dataset_dir"
        raise ConfigError(
            f"dataset {entry!r}: path {name!r} is relative to the working directory (as in LLaMA-Factory v1) and is "
            f"not in {os.getcwd()}; {hint} to the folder the paths are relative to, run from there, or make it absolute"
        )


def entry_location(name: str, raw: Mapping, resolver: Resolver, env: Mapping[str, str]) -> tuple[str, bool]:
    hubs = [k for k in HUB_KEYS if raw.get(k)]
    files = [k for k in FILE_KEYS if raw.get(k)]
    if (hubs and files) or len(files) > 1 or not (hubs or files):
        raise ConfigError(
            f"dataset {name!r} needs exactly one of file_name, cloud_file_name, path (with source: "
            f"{'|'.join(SOURCES)}) or hub URLs (hf_hub_url, ms_hub_url, om_hub_url), got {files + hubs}"
        )
    if hubs:
        return _hub(name, raw, _chosen_hub(raw, env)), True
    key, value = files[0], raw[files[0]]
    if not isinstance(value, str):
        raise ConfigError(f"dataset {name!r}: {key} must be a string, got {value!r}")
    if "source" in raw and key != "path":
        raise ConfigError(f"dataset {name!r}: source goes with path; with {key} remove source")
    if key == "script_url":
        raise ConfigError(
            f"dataset {name!r}: script_url (a dataset loading script) is not supported; datasets no longer runs "
            "scripts: convert the data to files and use file_name"
        )
    if key != "path":
        return (resolver.file_name(value) if key == "file_name" else value), False
    source = _source(name, raw)
    if source == "local":
        return resolver.path(name, value), False
    return _hub(name, {**raw, f"{source}_url": value}, source), True


def _source(name: str, raw: Mapping) -> str:
    source = raw.get("source", "hf_hub")  # LLaMA-Factory v1's default
    source = SOURCE_ALIASES.get(source, source)
    if source not in SOURCES:
        raise ConfigError(f"dataset {name!r}: source must be one of {', '.join(SOURCES)}, got {raw.get('source')!r}")
    return source


def _chosen_hub(raw: Mapping, env: Mapping[str, str]) -> str:
    """As LLaMA-Factory v0: ModelScope/Modelers when asked for by the environment or the only URL."""
    has_hf = bool(raw.get("hf_hub_url"))
    for hub, flag in (("ms_hub", "USE_MODELSCOPE_HUB"), ("om_hub", "USE_OPENMIND_HUB")):
        if raw.get(f"{hub}_url") and (_truthy(env.get(flag)) or not has_hf):
            return hub
    return "hf_hub"


def _hub(name: str, raw: Mapping, hub: str) -> str:
    value = raw[f"{hub}_url"]
    if not isinstance(value, str):
        raise ConfigError(f"dataset {name!r}: {hub}_url must be a string, got {value!r}")
    if hub in OTHER_HUBS:
        label, command = OTHER_HUBS[hub]
        raise ConfigError(
            f"dataset {name!r} is on {label} ({value!r}); h5pipe reads the Hugging Face hub and files only and "
            f"works offline from other hubs: download it ({command.format(id=value)}) and set "
            f"file_name (v0) or path with source: local (v1) to DIR"
        )
    return value


def _truthy(value: str | None) -> bool:
    return (value or "").strip().lower() in ("1", "true", "yes", "y")


def resolve(base: str, name: str) -> str:
    """``name`` relative to the folder ``base`` (URLs and absolute paths as is)."""
    if "://" in name or os.path.isabs(name):
        return name
    return posixpath.join(base, name) if "://" in base else os.path.join(os.path.expanduser(base), name)
