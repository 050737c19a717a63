"""HDF5 crash variants, produced for real, are all detected by verify and rebuilt by a rerun.

Variants: a real output truncated at many points; a file whose writer was SIGKILLed before close;
one SIGKILLed right after a flush of data and attributes; one closed without its completion mark;
an output whose quarantine file never got published. ``h5py.is_hdf5`` accepts most of them, which
is why verify reads the completion attribute and the invariants instead.
"""

from __future__ import annotations

import filecmp
import shutil

import h5py
import pytest

from flows.cache_flow import cache_flow
from pipeline_core.commit.verify import h5_problems, verify_output
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged
from pipeline_core.processors import ProcessorFactory
from pipeline_core.stages.cache import CacheOptions, cache_file
from tests.reliability.helpers import cached_run, kill, mtimes, start_worker, write_jsonl


@pytest.fixture(scope="module")
def good_h5(tmp_path_factory, gpt2, c4_rows):
    """A real, complete cache output of the c4 rows."""
    folder = tmp_path_factory.mktemp("good")
    source = write_jsonl(folder / "in" / "c4.jsonl", c4_rows)
    cache_file(str(source), str(folder / "out"), ProcessorFactory.create("pt", gpt2), CacheOptions(batch_size=64))
    return folder / "out" / "c4.h5"


def killed_writer(path, mode: str):
    """A worker writes ``path`` with H5Writer and is SIGKILLed at the chosen moment."""
    kill(start_worker("h5", path, mode))
    return path


def truncated(source, path, fraction: float):
    shutil.copy(source, path)
    with open(path, "r+b") as f:
        f.truncate(int(source.stat().st_size * fraction))
    return path


@pytest.mark.parametrize("fraction", [0.0, 0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 0.75, 0.9, 0.99, 0.9999])
def test_every_truncation_of_a_real_output_is_detected(good_h5, tmp_path, fraction):
    assert h5_problems(str(good_h5)) == []
    path = truncated(good_h5, tmp_path / "t.h5", fraction)
    assert h5_problems(str(path)), f"truncated to {fraction:.2%} and not detected"


@pytest.mark.parametrize("mode", ["before-close", "after-flush"])
def test_a_writer_killed_mid_file_leaves_a_file_is_hdf5_accepts_and_verify_rejects(tmp_path, mode):
    path = killed_writer(tmp_path / "killed.h5", mode)
    assert h5py.is_hdf5(path)  # the naive check is fooled
    assert h5_problems(str(path))


def test_a_file_closed_without_its_completion_mark_is_detected(tmp_path):
    writer = H5Writer(str(tmp_path / "x.h5"))  # an exception path closes without ``complete``
    writer.append_ragged("sequence", Ragged.from_lists([[1, 2, 3], [4]]))
    writer.set_attrs({"keys": ["sequence"], "rows_read": 2, "samples_written": 2, "rows_skipped": 0})
    writer.close(complete=False)
    assert h5_problems(str(tmp_path / "x.h5")) == ["not complete (the writer never finished it)"]


def test_an_output_whose_quarantine_file_was_never_published_is_detected(tmp_path, gpt2, c4_rows):
    source = write_jsonl(tmp_path / "in.jsonl", c4_rows[:20] + [{"text": ""}, {"nope": 1}])
    cache_file(str(source), str(tmp_path / "out"), ProcessorFactory.create("pt", gpt2))
    assert h5_problems(str(tmp_path / "out" / "in.h5")) == []
    (tmp_path / "out" / "in.errors.jsonl").unlink()  # the state a kill between the two publishes leaves
    assert "2 rows skipped but 0 in in.errors.jsonl" in h5_problems(str(tmp_path / "out" / "in.h5"))[0]


@pytest.mark.slow
def test_crash_variants_under_final_names_are_reported_and_rebuilt_good_chunks_untouched(gpt2_path, tmp_path, c4_rows):
    first = cached_run(gpt2_path, tmp_path, c4_rows)
    p, out, originals, before = first.params, first.out, first.originals, first.mtimes

    truncated(originals / "train_chunk_1.h5", out / "train_chunk_1.h5", 0.5)
    killed_writer(out / "train_chunk_2.h5", "before-close")
    killed_writer(out / "train_chunk_3.h5", "after-flush")

    report = verify_output(str(out))
    assert not report.ok
    assert sorted(report.problems) == ["train_chunk_1.h5", "train_chunk_2.h5", "train_chunk_3.h5"]

    again = cache_flow(p)
    assert again["cached"] == [True, False, False, False]
    assert mtimes(out)["train_chunk_0.h5"] == before["train_chunk_0.h5"]
    for i in (1, 2, 3):
        assert filecmp.cmp(out / f"train_chunk_{i}.h5", originals / f"train_chunk_{i}.h5", shallow=False)
    assert verify_output(str(out)).ok
