"""The kept Prefect server's record and liveness: ``<cache dir>/prefect-server/server.json``
(written by flows/server_keeper.py, the only writer, once its server answers), the ``last-used`` stamp its idle
clock reads, and the checks that a recorded process lives and its API answers.
"""

from __future__ import annotations

import contextlib
import json
import os
import urllib.error
import urllib.request
from dataclasses import dataclass
from pathlib import Path

from pipeline_core.storage.records import cache_dir, default_cache_dir


@dataclass
class ServerRecord:
    """What the keeper writes once its server answers; ``pid`` is the keeper's, ``server_pid`` the server's."""

    url: str
    pid: int
    server_pid: int
    port: int
    idle_seconds: float
    started: float

    @property
    def api_url(self) -> str:
        return f"{self.url}/api"


def state_dir() -> Path:
    return (cache_dir() or default_cache_dir()) / "prefect-server"


def record_path() -> Path:
    return state_dir() / "server.json"


def used_path() -> Path:
    """Touched by every run that uses the kept server; the keeper's idle clock starts from its mtime."""
    return state_dir() / "last-used"


def log_path() -> Path:
    return state_dir() / "server.log"


def read_record() -> ServerRecord | None:
    try:
        return ServerRecord(**json.loads(record_path().read_text(encoding="utf-8")))
    except (OSError, ValueError, TypeError):
        return None


def pid_alive(pid: int) -> bool:
    """True while ``pid`` runs (a zombie counts as gone)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return not _is_zombie(pid)


def _is_zombie(pid: int) -> bool:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] == "Z"
    except (OSError, IndexError):
        return False


def answers(api_url: str, timeout: float = 0.5) -> bool:
    """Does a Prefect API answer its health check at ``api_url``?"""
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=timeout) as response:
            return response.status == 200
    except (urllib.error.URLError, OSError, ValueError):
        return False


def running_kept_server() -> ServerRecord | None:
    """The kept server's record when its keeper lives and the server answers."""
    record = read_record()
    if record and pid_alive(record.pid) and answers(record.api_url):
        return record
    return None


def touch_used() -> None:
    with contextlib.suppress(OSError):
        used_path().parent.mkdir(parents=True, exist_ok=True)
        used_path().touch()


# ---- starting and stopping the kept server -------------------------------------------------------
