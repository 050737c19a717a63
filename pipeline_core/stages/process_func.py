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
import os
import sys
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
    which no hash here can see (bump it when such code changes). A decorated function also hashes
    the files of what it wraps and of its decorator. Without a readable module file (a builtin, a C
    extension), its qualified name and the module's ``__version__``."""
    if func is None:
        return ""
    name = f"{func.__module__}:{func.__qualname__}"
    digest = hashlib.sha256(f"{name}\n{version}\n".encode())
    files = _source_files(func)
    for path in files:
        with open(path, "rb") as f:
            digest.update(f.read())
    if not files:
        digest.update(str(getattr(inspect.getmodule(func), "__version__", "")).encode())
    return digest.hexdigest()


def _source_files(func: Callable) -> list[str]:
    """The readable source files that make ``func``: its module's (where the user wrote it; a
    ``functools.wraps`` wrapper carries the wrapped function's module), the wrapped function's, and
    the wrapper's own (a decorator from elsewhere). ``inspect.getsourcefile`` alone read the
    decorator's file, or, for ``functools.cache``, none at all, so edits re-used old exports."""
    found = [getattr(sys.modules.get(func.__module__), "__file__", None)]
    for f in (inspect.unwrap(func), func):
        try:
            found.append(inspect.getsourcefile(f) or inspect.getfile(f))
        except TypeError:  # a builtin, a C extension, a functools.cache wrapper
            continue
    return [path for path in dict.fromkeys(found) if path and os.path.isfile(path)]
