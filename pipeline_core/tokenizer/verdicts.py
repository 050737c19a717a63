"""Probe verdicts, remembered: did gigatoken reproduce `tokenizers` on this tokenizer?

Checking the fast backend against the reference (probe.py) builds a second, slow tokenizer and
encodes ~100k characters with both: about a second, paid by every process that loads the
tokenizer (each flow run, each worker). The verdict is a pure function of the tokenizer.json,
the probe set and the two libraries' versions, so it is recorded once per combination:

- in memory, for the rest of the process;
- on disk, one small record per combination under ``{cache dir}/backend-verdicts/`` (records.py
  says where the cache dir is; ``H5PIPE_CACHE_DIR=none`` turns the disk records off, and every new
  process checks again).

A record holds ``None`` (gigatoken reproduced every probe) or the reason it did not. A new
version of either library, a changed probe set or any byte of the tokenizer.json gives a new
key, so a stale record is never consulted. An unreadable record is ignored and rewritten.
"""

from __future__ import annotations

import hashlib
import time
from importlib import metadata

from pipeline_core.storage.records import MISSING, cache_dir, read_record, write_record
from pipeline_core.tokenizer.probe import probe_set_version

__all__ = ["UNKNOWN", "cache_dir", "forget_all_in_memory", "recall", "remember", "verdict_key"]

KIND = "backend-verdicts"

UNKNOWN = object()  # recall() found no record
_memory: dict[str, str | None] = {}


def verdict_key(tokenizer_json: str) -> str:
    """What the verdict depends on: tokenizer bytes, probe set, gigatoken and tokenizers versions."""
    parts = [
        hashlib.sha256(tokenizer_json.encode("utf-8")).hexdigest(),
        probe_set_version(),
        _version("gigatoken"),
        _version("tokenizers"),
    ]
    return hashlib.sha256("\n".join(parts).encode("utf-8")).hexdigest()


def recall(key: str):
    """The recorded verdict (None or a reason), or ``UNKNOWN`` when none is recorded."""
    if key in _memory:
        return _memory[key]
    found = _read_record(key)
    if found is not UNKNOWN:
        _memory[key] = found
    return found


def remember(key: str, reason: str | None) -> None:
    _memory[key] = reason
    _write_record(key, reason)


def forget_all_in_memory() -> None:
    """For tests: drop the in-process verdicts (disk records stay; point the cache dir elsewhere)."""
    _memory.clear()


def _read_record(key: str):
    record = read_record(KIND, key)
    if record is MISSING or "reason" not in record:
        return UNKNOWN  # torn or foreign file: check again and overwrite it
    reason = record["reason"]
    return reason if isinstance(reason, str) or reason is None else UNKNOWN


def _write_record(key: str, reason: str | None) -> None:
    record = {
        "reason": reason,
        "gigatoken": _version("gigatoken"),
        "tokenizers": _version("tokenizers"),
        "probe_set": probe_set_version(),
        "checked_at": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
    write_record(KIND, key, record)


def _version(package: str) -> str:
    try:
        return metadata.version(package)
    except metadata.PackageNotFoundError:
        return "absent"
