"""HeapTrimmer trims once per ``every`` bytes of input, and never where malloc_trim is missing."""

import platform

import pytest

from pipeline_core.memory.heap import HeapTrimmer, malloc_trim, release_free_memory


def test_trims_once_each_time_the_input_passes_another_step():
    calls = []
    trimmer = HeapTrimmer(every=100, trim=lambda: calls.append(1))
    seen = []
    for read in [10, 60, 99, 100, 150, 199, 260, 270, 900]:
        trimmer.after(read)
        seen.append(len(calls))
    # 100 trims (next at 200), 260 trims (next at 360), 900 trims
    assert seen == [0, 0, 0, 1, 1, 1, 2, 2, 3]


def test_without_malloc_trim_it_does_nothing(monkeypatch):
    monkeypatch.setattr("pipeline_core.memory.heap.malloc_trim", lambda: None)
    trimmer = HeapTrimmer(every=1)
    assert trimmer.trim is None
    trimmer.after(10)  # no error
    release_free_memory()  # no error either


@pytest.mark.skipif(platform.system() != "Linux" or platform.libc_ver()[0] != "glibc", reason="glibc only")
def test_glibc_has_malloc_trim_and_it_runs():
    trim = malloc_trim()
    assert trim is not None
    trim()
