"""The export key covers all the code that shapes the bytes: the process_func's module file, and a version (defect 5)."""

from __future__ import annotations

import importlib
import sys

from pipeline_core.stages.process_func import load_process_func, source_hash

MODULE = """
SUFFIX = "{suffix}"


def helper(text):
    return text + SUFFIX


def process(row):
    return {{"text": helper(row["text"])}}
"""


def load(tmp_path, monkeypatch, suffix: str):
    (tmp_path / "my_rows.py").write_text(MODULE.format(suffix=suffix))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_rows", None)
    importlib.invalidate_caches()
    return load_process_func("my_rows:process")


def test_a_changed_helper_or_constant_changes_the_hash(tmp_path, monkeypatch):
    first = source_hash(load(tmp_path, monkeypatch, "!"))
    assert source_hash(load(tmp_path, monkeypatch, "!")) == first  # same code: same key
    assert source_hash(load(tmp_path, monkeypatch, "?")) != first  # only a module constant changed


def test_the_version_parameter_is_in_the_export_settings():
    from tasks.models import ExportJob

    a = ExportJob(source="s", output_dir="o", process_func="m:f", process_func_version="1")
    b = ExportJob(source="s", output_dir="o", process_func="m:f", process_func_version="2")
    assert a.settings() != b.settings()


DECORATED = """
import functools

from my_decorator import logged

SUFFIX = "{suffix}"


@logged
def process(row):
    return {{"text": row["text"] + SUFFIX}}


@functools.cache
def cached(text):
    return text + SUFFIX
"""

DECORATOR = """
import functools


def logged(func):
    @functools.wraps(func)
    def wrapper(row):
        return func(row)

    return wrapper
"""


def load_decorated(tmp_path, monkeypatch, suffix: str, name: str):
    (tmp_path / "my_decorator.py").write_text(DECORATOR)
    (tmp_path / "my_decorated.py").write_text(DECORATED.format(suffix=suffix))
    monkeypatch.syspath_prepend(str(tmp_path))
    sys.modules.pop("my_decorated", None)
    importlib.invalidate_caches()
    return load_process_func(f"my_decorated:{name}")


def test_a_decorated_function_is_hashed_from_its_own_module(tmp_path, monkeypatch):
    """inspect.getsourcefile read a functools.wraps wrapper's file (the decorator's module) and none
    for functools.cache: editing the function reused the old export."""
    for name in ("process", "cached"):
        first = source_hash(load_decorated(tmp_path, monkeypatch, "!", name))
        assert source_hash(load_decorated(tmp_path, monkeypatch, "!", name)) == first
        assert source_hash(load_decorated(tmp_path, monkeypatch, "?", name)) != first, name
