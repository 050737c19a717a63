"""Values derived from a whole tokenizer.json, recorded per exact text so a process need not parse it.

Loading a tokenizer needs two values computed from its entire JSON:

- the copy gigatoken loads, whose ``added_tokens`` keep only the non-special entries
  (backends_gigatoken.py says why);
- the tokenizer's fingerprint: sha256 of the canonical JSON (keys sorted) followed by the roles,
  the tokenizer part of every cache key.

Parsing a 2 MB tokenizer.json for them took ~0.3 s per process with GPT-2, as long as gigatoken's
own load. Both are pure functions of the text (and, for the fingerprint, the roles), so they are
kept in memory and in a record (records.py) under the sha256 of the text: a later process reads
the record and parses nothing. A roles combination the record does not hold yet is computed from
the JSON once and added to it.
"""

from __future__ import annotations

import hashlib
from functools import lru_cache

import orjson

from pipeline_core.storage.records import MISSING, read_record, write_record

KIND = "tokenizer-derived"
FORMAT = 1  # bump when what is derived, or how, changes: older records are then ignored


def gigatoken_json(tokenizer_json: str) -> str:
    """The tokenizer.json with special entries dropped from ``added_tokens`` (vocab untouched)."""
    return _record(tokenizer_json)["gigatoken_json"]


def fingerprint(tokenizer_json: str, roles_json: str) -> str:
    """sha256 of the canonical tokenizer.json, then of ``roles_json`` (the roles, keys sorted)."""
    record = _record(tokenizer_json)
    known = record["fingerprints"].get(roles_json)
    if known is None:
        digest = hashlib.sha256(_canonical(orjson.loads(tokenizer_json)))
        digest.update(roles_json.encode("utf-8"))
        known = record["fingerprints"][roles_json] = digest.hexdigest()
        write_record(KIND, _key(tokenizer_json), record)
    return known


def without_special_added_tokens(config: dict) -> str:
    config = {**config, "added_tokens": [t for t in config.get("added_tokens") or [] if not t.get("special")]}
    return orjson.dumps(config).decode("utf-8")


@lru_cache(maxsize=4)
def _record(tokenizer_json: str) -> dict:
    key = _key(tokenizer_json)
    record = read_record(KIND, key)
    if _usable(record):
        return record
    copy = without_special_added_tokens(orjson.loads(tokenizer_json))
    record = {"format": FORMAT, "gigatoken_json": copy, "gigatoken_json_sha256": _sha256(copy), "fingerprints": {}}
    write_record(KIND, key, record)
    return record


def _usable(record) -> bool:
    """A record of this format, whose gigatoken copy is the text it was written with (a flipped
    byte would otherwise change ids silently: the probe verdict is keyed on the original JSON)."""
    return (
        record is not MISSING
        and record.get("format") == FORMAT
        and isinstance(record.get("gigatoken_json"), str)
        and isinstance(record.get("fingerprints"), dict)
        and record.get("gigatoken_json_sha256") == _sha256(record["gigatoken_json"])
    )


def _key(tokenizer_json: str) -> str:
    return _sha256(tokenizer_json)


def _sha256(text: str) -> str:
    return hashlib.sha256(text.encode("utf-8")).hexdigest()


def _canonical(config: dict) -> bytes:
    return orjson.dumps(config, option=orjson.OPT_SORT_KEYS)


def forget_all_in_memory() -> None:
    """For tests: what a new process sees (records on disk stay)."""
    _record.cache_clear()
