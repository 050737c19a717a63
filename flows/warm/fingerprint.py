"""The fingerprint of what a warm process has baked in at import time.

A warm process imported Prefect, the flows and their libraries under one environment, working
directory config and code; a client may use it only when all of these are the same for it,
else it runs cold (and leaves a warm process of its own fingerprint for next time):

- the environment variables read at import time (Prefect's settings, h5pipe's, Python's,
  thread pools', Hugging Face's, fsspec's and HDF5's, the locale, HOME, TZ, TMPDIR);
- ``sys.executable``, the Python version and ``sys.path`` (plus the cwd when ``sys.path`` holds
  a relative entry, since imports then depend on it);
- the code: size and mtime of every file of h5pipe's packages, and the mtime of every
  ``sys.path`` directory (a pip install or upgrade adds or renames entries there, changing it);
- the files Prefect reads its settings from: ``prefect.toml``, ``.env`` and ``pyproject.toml`` in
  the cwd, and the profiles file.

Stale code is never served: an edited h5pipe file changes the fingerprint.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

ENV_PREFIXES = ("PREFECT_", "H5PIPE_", "PYTHON", "OMP_", "MKL_", "OPENBLAS_", "NUMEXPR_", "TOKENIZERS_",
                "HF_", "TRANSFORMERS_", "FSSPEC_", "HDF5_", "LC_", "XDG_")  # fmt: skip
ENV_NAMES = ("LANG", "LANGUAGE", "HOME", "TZ", "TMPDIR", "TEMP", "TMP", "NO_COLOR", "FORCE_COLOR")
# H5PIPE_WARM chooses whether to go warm, not what the run does.
ENV_IGNORED = ("H5PIPE_WARM",)
PACKAGES = ("flows", "tasks", "pipeline_core", "deployments")
CONFIG_FILES = ("prefect.toml", ".env", "pyproject.toml")


def fingerprint(environ=None, cwd: str | None = None, path: list[str] | None = None) -> str:
    """16 hex digits naming the warm process this client may use."""
    environ = os.environ if environ is None else environ
    cwd = os.getcwd() if cwd is None else cwd
    path = sys.path if path is None else path
    digest = hashlib.sha256()
    for part in (_environment(environ), _interpreter(path, cwd), _code(path), _configs(environ, cwd)):
        for item in part:
            digest.update(repr(item).encode("utf-8", "surrogateescape") + b"\0")
    return digest.hexdigest()[:16]


def code_identity(path: list[str] | None = None) -> tuple[str, str]:
    """(where h5pipe's code is, a digest of its files): a warm process of the same place but another
    digest runs code that no longer exists there, and is retired (flows/warm/loop.py)."""
    digest = hashlib.sha256(repr(_code(sys.path if path is None else path)).encode("utf-8", "surrogateescape"))
    return str(Path(__file__).resolve().parents[2]), digest.hexdigest()[:16]


def _environment(environ) -> list:
    return sorted(
        (k, v) for k, v in environ.items() if (k.startswith(ENV_PREFIXES) or k in ENV_NAMES) and k not in ENV_IGNORED
    )


def _interpreter(path: list[str], cwd: str) -> list:
    relative = any(not os.path.isabs(p) for p in path)
    return [sys.executable, sys.version, list(path), cwd if relative else None]


def _code(path: list[str]) -> list:
    root = Path(__file__).resolve().parents[2]
    stats = [_stat(root / "pyproject.toml")]
    for package in PACKAGES:
        stats.extend(_tree(root / package))
    # a relative entry is the cwd, already in the fingerprint; its mtime changes with every output
    stats.extend(_stat(Path(p)) for p in path if os.path.isabs(p))
    return stats


def _tree(folder: Path) -> list:
    found = []
    try:
        entries = list(os.scandir(folder))
    except OSError:
        return found
    for entry in entries:
        if entry.is_dir(follow_symlinks=False) and entry.name != "__pycache__":
            found.extend(_tree(Path(entry.path)))
        elif entry.name.endswith((".py", ".json", ".yaml", ".jinja")):
            found.append(_stat(Path(entry.path)))
    return sorted(found)


def _stat(path: Path) -> tuple:
    try:
        s = path.stat()
    except OSError:
        return (str(path), None)
    return (str(path), s.st_size, s.st_mtime_ns)


def _configs(environ, cwd: str) -> list:
    home = environ.get("PREFECT_HOME") or str(Path(environ.get("HOME") or Path.home()) / ".prefect")
    profiles = environ.get("PREFECT_PROFILES_PATH") or str(Path(home) / "profiles.toml")
    return [_content(Path(cwd) / name) for name in CONFIG_FILES] + [_content(Path(profiles))]


def _content(path: Path) -> tuple:
    try:
        return (str(path), hashlib.sha256(path.read_bytes()).hexdigest())
    except OSError:
        return (str(path), None)
