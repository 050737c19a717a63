"""``process_func`` given by name (``"package.module:function"``), and a hash of its source code.

Flows take the name, not the function, so parameters stay plain data; the hash (of the function's
whole module file, plus the ``process_func_version`` the user gives for code it imports) goes into
the export cache key, so editing the function, a helper or a constant beside it re-exports.

A ``process_func`` is trusted code: the worker imports and runs it with the worker's rights
(see docs/commit-protocol.md).
"""

from __future__ import annotations

import hashlib
import importlib
import inspect
from collections.abc import Callable

from pipeline_core.errors import ConfigError


def load_process_func(name: str | None) -> Callable | None:
    if not name:
        return None
    module_name, sep, attr = name.partition(":")
    if not sep or not module_name or not attr:
        raise ConfigError(f"process_func {name!r} must look like 'package.module:function'")
    try:
        module = importlib.import_module(module_name)
    except ImportError as e:
        raise ConfigError(f"process_func {name!r}: cannot import {module_name!r} ({e}); is it on PYTHONPATH?") from e
    func = getattr(module, attr, None)
    if not callable(func):
        raise ConfigError(f"process_func {name!r}: {module_name} has no function {attr!r}")
    return func


def source_hash(func: Callable | None, version: str = "") -> str:
    """sha256 of the function's name and its whole module file (so a helper or a constant it uses
    beside it is covered), plus ``version``: the user's word for code it imports from elsewhere,
    which no hash here can see (bump it when such code changes). Without a readable module file
    (a builtin, a C extension), its qualified name and the module's ``__version__``."""
    if func is None:
        return ""
    name = f"{func.__module__}:{func.__qualname__}"
    digest = hashlib.sha256(f"{name}\n{version}\n".encode())
    digest.update(_module_bytes(func))
    return digest.hexdigest()


def _module_bytes(func: Callable) -> bytes:
    try:
        path = inspect.getsourcefile(func) or inspect.getfile(func)
        with open(path, "rb") as f:
            return f.read()
    except (OSError, TypeError):
        module = inspect.getmodule(func)
        return str(getattr(module, "__version__", "")).encode()
