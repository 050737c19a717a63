"""``process_func`` given by name (``"package.module:function"``), and a hash of its source code.

Flows take the name, not the function, so parameters stay plain data; the hash goes into the
export cache key, so editing the function re-exports.
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


def source_hash(func: Callable | None) -> str:
    """sha256 of the function's source (or its qualified name when the source is unavailable)."""
    if func is None:
        return ""
    try:
        text = inspect.getsource(func)
    except (OSError, TypeError):
        text = f"{func.__module__}:{func.__qualname__}"
    return hashlib.sha256(text.encode("utf-8")).hexdigest()
