"""The manifest: one ``h5pipe-manifest.json`` per output folder, the commit record of a run.

It lists every file a stage published (outputs, quarantine files, Megatron ``.bin``/``.idx``)
with its size and sha256; whether an output may be reused is decided from it by one rule,
``standing.still_stands``. The manifest is rewritten atomically as chunks finish (at most about once a
second, flows/commit.py), so a crash loses at most the chunks in flight and those of the last second, and a rerun redoes exactly the chunks without a
verified entry. ``complete`` is False from a run's first write until its final commit: readers
(the cache stage, ``H5Dataset``) refuse a folder whose set of outputs is not final.
``config_hash`` pins the settings the folder was written with: a rerun with other settings into
the same folder is refused unless the caller asks to overwrite.

One run writes a folder at a time: it holds the folder's lock (``lock.py``) from before it reads
the manifest until after its final commit. See docs/commit-protocol.md.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field, fields

import orjson

from pipeline_core.errors import ConfigError
from pipeline_core.storage.fs import join_url, natural_key, url_to_fs, write_bytes_atomic
from pipeline_core.version import FORMAT_VERSION

MANIFEST = "h5pipe-manifest.json"


@dataclass(slots=True)
class ManifestEntry:
    name: str  # file name inside the output folder
    sha256: str
    size: int
    source_sha256: str = ""
    rows: int = 0
    samples: int = 0
    tokens: int = 0
    extra: dict = field(default_factory=dict)


@dataclass(slots=True)
class Manifest:
    stage: str
    config_hash: str
    format_version: str = FORMAT_VERSION
    entries: dict[str, ManifestEntry] = field(default_factory=dict)
    complete: bool = True  # False while a run is writing the folder: its set of outputs is not final
    # URLs of dropped outputs' files being removed: written with the manifest that stops listing
    # them, emptied once they are gone, so a run killed in between leaves them for the next to remove
    dropping: list[str] = field(default_factory=list)
    # each entry's text in the last JSON written, by its compact JSON (see ``_entry_text``)
    texts: dict[str, str] = field(default_factory=dict, init=False, repr=False, compare=False)

    def to_json(self) -> bytes:
        """``json.dumps`` of the manifest, indented by 2, keys sorted; each entry's part is encoded
        once (see ``_entry_text``), the rest around it by ``json.dumps`` itself."""
        body = {
            "stage": self.stage,
            "config_hash": self.config_hash,
            "format_version": self.format_version,
            "complete": self.complete,
            "entries": {},
        }
        if self.dropping:  # absent when empty: the bytes of a manifest without any stay as they were
            body["dropping"] = sorted(self.dropping)
        text = json.dumps(body, indent=2, sort_keys=True)
        texts: dict[str, str] = {}  # this rewrite's entry texts: kept for the next, no others
        if self.entries:
            lines = [
                f"    {json.dumps(k)}: {_entry_text(e, self.texts, texts)}" for k, e in sorted(self.entries.items())
            ]
            text = text.replace(_NO_ENTRIES, '\n  "entries": {\n' + ",\n".join(lines) + "\n  }", 1)
        self.texts = texts
        return text.encode("utf-8")

    @classmethod
    def from_json(cls, data: bytes) -> Manifest:
        body = json.loads(data)
        entries = {k: ManifestEntry(**v) for k, v in body.get("entries", {}).items()}
        return cls(
            body["stage"],
            body["config_hash"],
            body.get("format_version", ""),
            entries,
            body.get("complete", True),
            list(body.get("dropping", [])),
        )

    def file_urls(self, output_dir: str) -> list[str]:
        """Every file the entries name: each entry's own, and a quarantine file recorded only in a
        result (manifests written before quarantine files were parts)."""
        urls = []
        for entry in self.entries.values():
            urls += entry_files(output_dir, entry)
        return list(dict.fromkeys(urls))

    def outputs(self, suffix: str) -> list[str]:
        """The committed outputs ending in ``suffix`` (never quarantine files), in natural order."""
        names = [n for n in self.entries if n.endswith(suffix) and not n.endswith(".errors.jsonl")]
        return sorted(names, key=natural_key)


def entry_files(output_dir: str, entry: ManifestEntry) -> list[str]:
    """The URLs of the files one entry stands for: its own, and its result's quarantine file. Both
    are in ``output_dir``: the recorded quarantine URL is taken by its name only, so a folder copied
    elsewhere never names (nor has removed) the original folder's file."""
    errors_url = (entry.extra.get("result") or {}).get("errors_url")
    return [join_url(output_dir, entry.name), *([in_folder(output_dir, errors_url)] if errors_url else [])]


def in_folder(output_dir: str, url: str) -> str:
    """The file of ``url``'s name in ``output_dir``: a manifest's recorded URLs (quarantine files,
    ``dropping``) name the folder it was written in, which a copy of the folder is not."""
    return join_url(output_dir, url.rstrip("/").rsplit("/", 1)[-1])


_ENTRY_FIELDS = tuple(f.name for f in fields(ManifestEntry))
_NO_ENTRIES = '\n  "entries": {}'  # in the indented body: once, as no string in JSON holds a newline
# json.dumps(value, sort_keys=True, separators=(",", ":")), its encoder made once
_compact = json.JSONEncoder(sort_keys=True, separators=(",", ":")).encode
_ORJSON_COMPACT = orjson.OPT_SORT_KEYS
_ORJSON_INDENTED = orjson.OPT_SORT_KEYS | orjson.OPT_INDENT_2


def _orjson_indents_as_python() -> bool:
    """Whether this orjson lays out indented JSON as Python's encoder does (checked once, on every
    kind of nesting; another orjson version might not, and ``_indented`` then never uses it)."""
    sample = {"a": [], "b": {}, "c": [1, {"d": [None, True, 0.5, "x"], "e": {}}, []], "f": {"g": {"h": -2}}}
    return orjson.dumps(sample, option=_ORJSON_INDENTED).decode() == json.dumps(sample, indent=2, sort_keys=True)


_ORJSON_AS_PYTHON = _orjson_indents_as_python()


def _entry_text(entry: ManifestEntry, known: dict[str, str], used: dict[str, str]) -> str:
    """The entry as ``json.dumps(manifest, indent=2, sort_keys=True)`` writes it at its depth.

    Python's indenting encoder is pure Python: a manifest of 1,000 entries took ~45-75 ms to
    encode, about once a second while chunks finish, with the GIL held against the chunks' own
    work. The compact encoder is C, and two values with the same compact JSON have the same
    indented JSON (only the whitespace between the same tokens differs), so each entry's indented
    text is made once and found by its compact JSON in ``known`` (the texts of the manifest's
    last rewrite) on later rewrites: ~40 us an entry found against ~75 us encoded (10 rewrites as
    1,000 entries arrive: 218-336 against 443-527 ms). An entry not found is written by orjson
    where that gives the same text (``_indented``). ``used`` collects this rewrite's texts."""
    value = _as_dict(entry)
    compact = _compact(value)
    text = known.get(compact)
    if text is None:
        # two levels deep in the manifest (its body, its entries): every line after the first 4 spaces in
        text = _indented(value, compact).replace("\n", "\n    ")
    used[compact] = text
    return text


def _indented(value: dict, compact: str) -> str:
    """``json.dumps(value, indent=2, sort_keys=True)``, written by orjson when it gives the same.

    orjson indents by 2 with the same line breaks and separators as Python's encoder (an empty
    ``{}`` or ``[]`` stays on its line), so the two indented texts are equal whenever their tokens
    are: when orjson's compact JSON is byte for byte Python's ``compact``. They differ, and Python's
    encoder writes the entry, for what Python escapes and orjson does not (anything outside
    printable ASCII), floats in exponent form or not finite, keys that are not strings, and
    integers beyond 64 bits; and always, should this orjson lay out indented JSON otherwise
    (``_ORJSON_AS_PYTHON``). orjson: ~3 us for a typical entry, Python's indenting encoder ~75."""
    try:
        if _ORJSON_AS_PYTHON and orjson.dumps(value, option=_ORJSON_COMPACT) == compact.encode("ascii"):
            return orjson.dumps(value, option=_ORJSON_INDENTED).decode("ascii")
    except (TypeError, ValueError):  # orjson.JSONEncodeError is a TypeError; surrogates, huge ints
        pass
    return json.dumps(value, indent=2, sort_keys=True)


def _as_dict(entry: ManifestEntry) -> dict:
    """``dataclasses.asdict(entry)`` without its deep copy of ``extra``, which ``json.dumps`` only
    reads: the same JSON at less than half the cost (1,000 entries: 31 against 72 ms a rewrite)."""
    return {name: getattr(entry, name) for name in _ENTRY_FIELDS}


class ManifestError(RuntimeError):
    """A manifest that cannot be read (torn, edited by hand): the message names the file."""


class IncompleteFolder(RuntimeError):
    """A folder whose manifest says a run is still writing it (or was killed before committing)."""


def committed_outputs(folder: str, suffix: str, storage_options: dict | None = None) -> list[str] | None:
    """Names of the outputs ending in ``suffix`` that the folder's manifest commits; None without a
    manifest. A folder whose last run has not committed is refused (``committed_manifest``)."""
    manifest = committed_manifest(folder, storage_options)
    return None if manifest is None else manifest.outputs(suffix)


def committed_manifest(folder: str, storage_options: dict | None = None) -> Manifest | None:
    """The folder's manifest, None without one. A folder whose last run has not committed (killed,
    or still running) is refused: its set of outputs is not final, and reading part of it would be
    a silent difference. Read it once per use: two reads can straddle another run's commit."""
    manifest = load_manifest(folder, storage_options)
    if manifest is None or manifest.complete:
        return manifest
    raise IncompleteFolder(
        f"{folder}: the {manifest.stage} run writing this folder has not finished (it is running, or was "
        f"interrupted); rerun the {manifest.stage} stage into it, then read it"
    )


def manifest_url(output_dir: str) -> str:
    return join_url(output_dir, MANIFEST)


def load_manifest(output_dir: str, storage_options: dict | None = None) -> Manifest | None:
    fs, path = url_to_fs(manifest_url(output_dir), storage_options)
    fs.invalidate_cache()
    if not fs.exists(path):
        return None
    with fs.open(path, "rb") as f:
        data = f.read()
    try:
        return Manifest.from_json(data)
    except (ValueError, KeyError, TypeError) as e:  # JSONDecodeError is a ValueError
        raise ManifestError(
            f"{manifest_url(output_dir)} is damaged ({type(e).__name__}: {e}); it is the folder's commit record: "
            "remove it and rerun the stage into the folder (every output is then checked again)"
        ) from e


def save_manifest(output_dir: str, data: bytes, storage_options: dict | None = None) -> None:
    """``data``: ``Manifest.to_json()``, written atomically."""
    write_bytes_atomic(manifest_url(output_dir), data, storage_options)


def open_for_run(
    output_dir: str, stage: str, config_hash: str, overwrite: bool, storage_options: dict | None = None
) -> Manifest:
    """The folder's manifest for a new run: refuses config drift unless ``overwrite``.

    Overwritten, the earlier run's files (outputs, Megatron pairs, quarantine files) are listed
    under ``dropping``: the final commit removes those this run does not write again, so no file of
    the replaced settings (a key, a level, a chunk this run does not make) stays beside the new ones."""
    existing = load_manifest(output_dir, storage_options)
    if existing is None:
        return Manifest(stage, config_hash)
    if overwrite and existing.config_hash != config_hash:
        replaced = existing.file_urls(output_dir) if existing.stage == stage else []
        return Manifest(stage, config_hash, dropping=sorted({*replaced, *existing.dropping}))
    if existing.stage != stage or existing.config_hash != config_hash:
        raise ConfigError(
            f"{output_dir} already holds {existing.stage} outputs written with other settings "
            f"(config {existing.config_hash[:12]}, now {config_hash[:12]}); write to another folder, "
            "or pass overwrite=True (CLI: --overwrite) to replace them"
        )
    return existing
