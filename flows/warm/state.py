"""Where the warm processes keep their sockets and records: ``<cache dir>/prefect-server/``,
beside the kept server's record, one ``warm-<fingerprint>.{sock,json,lock}`` per warm process.

The cache dir is computed here as pipeline_core.storage.records computes it (the same
H5PIPE_CACHE_DIR / XDG_CACHE_HOME rule) because the client may not import pipeline_core: its
imports are the cost this package removes.
"""

from __future__ import annotations

import contextlib
import json
import os
from pathlib import Path

from flows.env_switch import env_choice

MODES = ("auto", "on", "off")


def state_dir() -> Path:
    chosen = os.environ.get("H5PIPE_CACHE_DIR")
    if chosen is not None and chosen.strip().lower() not in ("", "none", "off"):
        return Path(chosen) / "prefect-server"
    base = os.environ.get("XDG_CACHE_HOME") or str(Path.home() / ".cache")
    return Path(base) / "h5pipe" / "prefect-server"


def socket_path(fingerprint: str) -> Path:
    return state_dir() / f"warm-{fingerprint}.sock"


def record_path(fingerprint: str) -> Path:
    return state_dir() / f"warm-{fingerprint}.json"


def lock_path(fingerprint: str) -> Path:
    return state_dir() / f"warm-{fingerprint}.lock"


def log_path() -> Path:
    return state_dir() / "warm.log"


def mode() -> str:
    """``H5PIPE_WARM``: auto (default: on unless ``H5PIPE_SERVER=temporary``), on, off."""
    return env_choice("H5PIPE_WARM", MODES)


def enabled() -> bool:
    """Can this platform and environment use a warm process?"""
    import socket

    if not (hasattr(os, "fork") and hasattr(socket, "send_fds") and hasattr(socket, "AF_UNIX")):
        return False  # e.g. Windows: every run is cold
    if not os.path.isdir("/proc/self/task"):
        return False  # e.g. macOS: no way to show the warm process has one thread to fork (zygote.py)
    chosen = mode()
    if chosen == "auto":
        return os.environ.get("H5PIPE_SERVER", "").strip().lower() != "temporary"
    return chosen == "on"


def read_records() -> list[dict]:
    """Every warm process's record in the state dir (the dead ones too: ``pid`` tells)."""
    return _read_json_files("warm-*.json")


def write_record(fingerprint: str, record: dict) -> None:
    path = record_path(fingerprint)
    temp = path.with_suffix(f".{os.getpid()}.tmp")
    temp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(temp, path)


def starting_path(pid: int) -> Path:
    """Written by the spawner, removed by the warm process once it serves (or gives up)."""
    return state_dir() / f"starting-warm-{pid}.json"


def note_starting(pid: int, fingerprint: str) -> None:
    starting_path(pid).write_text(json.dumps({"pid": pid, "fingerprint": fingerprint, "starting": True}))


def forget_starting(pid: int) -> None:
    with contextlib.suppress(OSError):
        starting_path(pid).unlink()


def read_starting() -> list[dict]:
    return _read_json_files("starting-warm-*.json")


def _read_json_files(pattern: str) -> list[dict]:
    """The readable JSON files of the state dir matching ``pattern``; one being replaced or
    removed while read is skipped (its writer is the authority on it)."""
    found = []
    for path in sorted(state_dir().glob(pattern)):
        try:
            found.append(json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError):
            continue
    return found
