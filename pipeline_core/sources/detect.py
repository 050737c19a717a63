"""Classify what a source string points at: data files, a dataset repository, a saved dataset,
a hub id, or a dataset_info file.

- A dataset_info file (several datasets), by its content: a ``*.yaml``/``*.yml`` file, or a JSON
  file holding one object whose values are entries naming a location (``file_name``, ``path``,
  ``hf_hub_url``...), whatever its name; ``dataset_info=True`` forces it, ``False`` never.
- Any other file, a glob, or a folder of data files: ``files`` (one format; see ``formats``). Files
  inside a folder are taken recursively in natural order; hidden (``.x``, ``_x``) files and
  ``README.md`` are ignored.
- A local folder whose ``README.md`` starts with YAML front matter: a dataset ``repo``, loaded by
  ``datasets.load_dataset(folder)`` exactly like a hub repository (splits from its ``configs``).
- A folder written by ``Dataset.save_to_disk`` (``state.json`` + ``dataset_info.json``): ``saved``.
- A URL (``s3://``, ``memory://``, ``hf://``...): files through fsspec, as above.
- Otherwise a string shaped like ``name`` or ``owner/name``: a ``hub`` id.
"""

from __future__ import annotations

import codecs
import glob
import json
import os
import posixpath
import re
from dataclasses import dataclass
from typing import Literal

import fsspec

from pipeline_core.sources.formats import builder_for, is_data_file
from pipeline_core.sources.locations import LOCATION_KEYS
from pipeline_core.storage.fs import natural_key, url_to_fs

Kind = Literal["files", "repo", "saved", "hub", "dataset_info"]
HUB_ID = re.compile(r"^[A-Za-z0-9][\w.-]*(/[A-Za-z0-9][\w.-]*)?$")
CONFIG_SUFFIXES = (".yaml", ".yml")
IGNORED_NAMES = ("readme.md",)
SNIFF_BYTES = 8 << 20  # a JSON file larger than this is data, not a dataset_info
LOCATION_NAMES = frozenset(LOCATION_KEYS)


@dataclass(frozen=True, slots=True)
class Location:
    kind: Kind
    target: str  # the path, URL or hub id
    files: tuple[str, ...] = ()  # kind "files": the data files (URLs keep their protocol)
    builder: str | None = None  # kind "files": the datasets builder that reads them


def locate(
    source: str | os.PathLike, storage_options: dict | None = None, dataset_info: bool | None = None
) -> Location:
    """What ``source`` is; ``dataset_info`` True/False says whether a file is a dataset_info (None: by content)."""
    text = os.fspath(source)
    if dataset_info:
        return _forced_dataset_info(text, storage_options)
    if "://" in text and not text.startswith("file://"):
        return _locate_url(text, storage_options, dataset_info)
    path = os.path.expanduser(text.removeprefix("file://"))
    if _has_glob(path):
        found = [p for p in glob.glob(path, recursive=True) if os.path.isfile(p)]
        return _files_location(text, sorted(found, key=natural_key))
    if os.path.isfile(path):
        return _locate_file(path, dataset_info)
    if os.path.isdir(path):
        return _locate_dir(path)
    if HUB_ID.match(text) and not (is_data_file(text) or text.lower().endswith((".json", *CONFIG_SUFFIXES))):
        return Location("hub", text)
    raise FileNotFoundError(
        f"no file or folder at {text!r}; for a Hugging Face hub dataset pass its id as 'owner/name'"
    )


def is_dataset_info(path: str, fs=None) -> bool:
    """Whether the file at ``path`` is a dataset_info: a YAML file, or JSON shaped like one (see the module doc)."""
    if path.lower().endswith(CONFIG_SUFFIXES):
        return True
    if not path.lower().endswith(".json"):
        return False
    fs = fs or fsspec.filesystem("file")
    if fs.size(path) > SNIFF_BYTES:  # LLaMA-Factory's own is ~30 KB; data files are what is large
        return False
    with fs.open(path, "rb") as f:
        return looks_like_dataset_info(f.read())


def looks_like_dataset_info(data: bytes) -> bool:
    """One JSON object whose values are all objects, at least one naming a dataset_info location
    (a UTF-8 byte order mark before it, as Windows editors write, is no part of the text)."""
    data = data.removeprefix(codecs.BOM_UTF8)
    if not data.lstrip().startswith(b"{"):
        return False
    try:
        parsed = json.loads(data)
    except ValueError:  # JSON Lines, or not JSON: a data file
        return False
    if not isinstance(parsed, dict) or not parsed or not all(isinstance(v, dict) for v in parsed.values()):
        return False
    return any(set(v) & LOCATION_NAMES for v in parsed.values())


def _forced_dataset_info(text: str, storage_options: dict | None) -> Location:
    fs, path = url_to_fs(text, storage_options)
    if not fs.isfile(path):
        raise FileNotFoundError(f"dataset_info: no file at {text!r}")
    return Location("dataset_info", text)


def _locate_file(path: str, dataset_info: bool | None = None) -> Location:
    if dataset_info is None and is_dataset_info(path):
        return Location("dataset_info", path)
    return _files_location(path, [path])


def _locate_dir(path: str) -> Location:
    if _has_card_config(path):
        return Location("repo", path)
    if all(os.path.isfile(os.path.join(path, n)) for n in ("state.json", "dataset_info.json")):
        return Location("saved", path)
    return _files_location(path, _walk(path))


def _locate_url(url: str, storage_options: dict | None, dataset_info: bool | None = None) -> Location:
    fs, path = url_to_fs(url, storage_options)
    if _has_glob(path):
        found = [name for name, info in fs.glob(path, detail=True).items() if info["type"] == "file"]
    elif fs.isdir(path):
        found = [f for f in fs.find(path) if _wanted(posixpath.relpath(f, path))]
    elif fs.isfile(path):
        if dataset_info is None and is_dataset_info(path, fs):
            return Location("dataset_info", url)
        found = [path]
    else:
        raise FileNotFoundError(f"nothing at {url!r}; check the URL and storage_options")
    return _files_location(url, sorted((fs.unstrip_protocol(f) for f in found), key=natural_key))


def _files_location(where: str, files: list[str]) -> Location:
    return Location("files", where, tuple(files), builder_for(files, where))


def _walk(root: str) -> list[str]:
    found = []
    for folder, dirs, names in os.walk(root):
        dirs[:] = [d for d in dirs if not d.startswith((".", "_"))]
        found += [os.path.join(folder, n) for n in names if _wanted(n)]
    return sorted(found, key=natural_key)


def _wanted(relative: str) -> bool:
    parts = relative.replace(os.sep, "/").split("/")
    return not any(p.startswith((".", "_")) for p in parts) and parts[-1].lower() not in IGNORED_NAMES


def _has_card_config(path: str) -> bool:
    card = os.path.join(path, "README.md")
    if not os.path.isfile(card):
        return False
    with open(card, encoding="utf-8") as f:
        return f.readline().strip() == "---"


def _has_glob(path: str) -> bool:
    return any(c in path for c in "*?[")
