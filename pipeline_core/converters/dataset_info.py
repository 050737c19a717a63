"""Pick and configure a converter from a LLaMA-Factory ``dataset_info.json`` entry.

v1 entries name it: ``{"converter": "sharegpt"}`` (optional ``columns``/``tags`` are passed on).
v0 entries describe it: ``formatting`` (alpaca by default, or sharegpt), ``columns``, ``tags``
and ``ranking: true`` for preference pairs. A v0 alpaca entry whose only column is ``prompt``
(``{"columns": {"prompt": "text"}}``, a pretraining corpus) passes the text through.

v0 columns and tags mean what LLaMA-Factory's parser makes of them: without ``columns`` only the
format's own columns are read (alpaca: instruction, input, output; sharegpt: conversations), and
``system``, ``tools``, ``history`` and the media columns only when ``columns`` names them; a
``columns`` object turns off every column of the entry it does not name (an alpaca entry that
names prompt and response reads no ``input``), and a ``tags`` object every tag it does not name
(a turn whose role matched such a tag is then an unknown role, counted). The converters are
given those columns as ``None`` (off), so a ``system`` column the entry does not map is never read.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import fields as dataclass_fields
from typing import Any

from pipeline_core.converters.alpaca import AlpacaColumns
from pipeline_core.converters.pair import PairColumns
from pipeline_core.converters.registry import Converter, ConverterFactory
from pipeline_core.converters.sharegpt import ShareGPTColumns, ShareGPTTags
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
    if formatting == "alpaca" and not entry.get("ranking") and set(columns) == {"prompt"}:
        return "text", {"column": columns["prompt"]}
    name = "pair" if entry.get("ranking") else formatting
    fields = {"pair": PairColumns, "sharegpt": ShareGPTColumns, "alpaca": AlpacaColumns}[name]
    lf_columns = _lf_columns(columns, formatting, fields)
    lf_tags = {tag: tags.get(tag) for tag in _fields(ShareGPTTags)} if tags else {}
    options = _options(columns=lf_columns, tags=lf_tags if formatting == "sharegpt" else {})
    if name == "pair":  # the prompt only where LLaMA-Factory reads it for this formatting
        options["prompt_from"] = formatting
    return name, {**options, "turn_order": True} if formatting == "sharegpt" else options


# what LLaMA-Factory's v0 parser reads by default, per formatting; all else only when named
_V0_DEFAULTS = {
    "alpaca": {"prompt": "instruction", "query": "input", "response": "output"},
    "sharegpt": {"messages": "conversations"},
}
_V0_COMMON = ("system", "tools", "images", "videos", "audios", "chosen", "rejected")
_V0_OWN = {"alpaca": ("prompt", "query", "response", "history"), "sharegpt": ("messages",)}


def _lf_columns(columns: dict[str, Any], formatting: str, fields: type) -> dict[str, Any]:
    """The entry's columns as LLaMA-Factory's v0 parser sets them, limited to ``fields``'s names:
    named ones as named; unnamed ones off (None) when ``columns`` is given, else the format's defaults
    (every other column off). The sharegpt messages column and the pair's chosen/rejected, which a
    row cannot do without, keep the converter's own default when unnamed (a missing one is loud)."""
    read = set(_V0_COMMON) | set(_V0_OWN[formatting]) | set(columns)
    keep_default = {"messages", "chosen", "rejected"} | ({"prompt"} if fields is PairColumns else set())
    out = {}
    for f in dataclass_fields(fields):  # in the converter's order, and only where it differs
        lf = (columns.get(f.name) if columns else _V0_DEFAULTS[formatting].get(f.name)) if f.name in read else None
        if (lf is not None or f.name not in keep_default) and lf != f.default:
            out[f.name] = lf
    return out


def _fields(cls: type) -> tuple[str, ...]:
    return tuple(f.name for f in dataclass_fields(cls))


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
