"""Pick and configure a converter from a LLaMA-Factory ``dataset_info.json`` entry.

v1 entries name it: ``{"converter": "sharegpt"}`` (optional ``columns``/``tags`` are passed on).
v0 entries describe it: ``formatting`` (alpaca by default, or sharegpt), ``columns``, ``tags``
and ``ranking: true`` for preference pairs. A v0 alpaca entry whose only column is ``prompt``
(``{"columns": {"prompt": "text"}}``, a pretraining corpus) passes the text through.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pipeline_core.converters.registry import Converter, ConverterFactory
from pipeline_core.errors import ConfigError

V0_FORMATTINGS = ("alpaca", "sharegpt")
UNSUPPORTED_COLUMNS = ("kto_tag",)


def converter_from_dataset_info(entry: Mapping[str, Any]) -> Converter:
    name, options = converter_spec(entry)
    return ConverterFactory.create(name, **options)


def converter_spec(entry: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    """The converter name and options an entry asks for, without building it."""
    if not isinstance(entry, Mapping):
        raise ConfigError(f"a dataset_info entry must be an object, got {type(entry).__name__}")
    if "converter" in entry:
        return _v1_spec(entry)
    return _v0_spec(entry)


def _v1_spec(entry: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    mixed = sorted({"formatting", "ranking"} & set(entry))
    if mixed:
        raise ConfigError(f"dataset_info entry sets both converter (v1) and {mixed} (v0); keep only one style")
    name = entry["converter"]
    if not isinstance(name, str):
        raise ConfigError(f"dataset_info 'converter' must be a converter name, got {name!r}")
    return name, {key: entry[key] for key in ("columns", "tags") if entry.get(key)}


def _v0_spec(entry: Mapping[str, Any]) -> tuple[str, dict[str, Any]]:
    formatting = entry.get("formatting", "alpaca")
    if formatting not in V0_FORMATTINGS:
        raise ConfigError(f"unknown formatting {formatting!r}; expected one of {', '.join(V0_FORMATTINGS)}")
    columns, tags = _mapping(entry, "columns"), _mapping(entry, "tags")
    _check_v0(columns, tags, formatting)
    if entry.get("ranking"):
        return "pair", _options(columns=columns, tags=tags)
    if formatting == "sharegpt":
        return "sharegpt", _options(columns=columns, tags=tags)
    if set(columns) == {"prompt"}:
        return "text", {"column": columns["prompt"]}
    return "alpaca", _options(columns=columns)


def _check_v0(columns: dict[str, Any], tags: dict[str, Any], formatting: str) -> None:
    unsupported = sorted(set(columns) & set(UNSUPPORTED_COLUMNS))
    if unsupported:
        raise ConfigError(f"columns {unsupported} are not supported (KTO data); remove them")
    if tags and formatting != "sharegpt":
        raise ConfigError("tags only apply to formatting 'sharegpt'; remove tags or set formatting")


def _mapping(entry: Mapping[str, Any], key: str) -> dict[str, Any]:
    value = entry.get(key) or {}
    if not isinstance(value, Mapping):
        raise ConfigError(f"dataset_info {key!r} must be an object of name -> name, got {value!r}")
    return dict(value)


def _options(**options: dict[str, Any]) -> dict[str, Any]:
    return {key: value for key, value in options.items() if value}
