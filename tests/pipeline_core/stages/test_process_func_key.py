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
