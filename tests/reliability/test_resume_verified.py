"""Resume trusts only verified chunks: a corrupt one, one missing from the manifest and stray temps.

The Prefect result cache is removed first, so the manifest is the only record the rerun can trust.
"""

from __future__ import annotations

import filecmp
import json
import shutil

import pytest

from flows.cache_flow import cache_flow
from pipeline_core.commit.sweep import sweep_stale_temps
from pipeline_core.commit.verify import verify_output
from tests.reliability.helpers import cached_run, hidden, kill, mtimes, start_worker


def flip_a_byte_in_the_middle(path) -> None:
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size: only the sha256 tells
    path.write_bytes(bytes(data))


def unlist(out, name: str) -> None:
    manifest_path = out / "h5pipe-manifest.json"
    manifest = json.loads(manifest_path.read_text())
    del manifest["entries"][name]
    manifest_path.write_text(json.dumps(manifest))


@pytest.mark.slow
def test_rerun_rebuilds_corrupt_and_unlisted_sweeps_dead_temps_and_keeps_the_rest(gpt2_path, tmp_path, c4_rows):
    first = cached_run(gpt2_path, tmp_path, c4_rows)
    p, out, originals, before = first.params, first.out, first.originals, first.mtimes
    shutil.rmtree(out / ".h5pipe")  # no Prefect results: only the manifest can vouch for a chunk

    flip_a_byte_in_the_middle(out / "train_chunk_1.h5")
    unlist(out, "train_chunk_2.h5")
    kill(dead := start_worker("hold-temp", out / "train_chunk_3.h5"))
    live = start_worker("hold-temp", out / "train_chunk_0.h5")
    try:
        report = verify_output(str(out))
        stray = dead.first_line.rsplit("/", 1)[-1]
        assert sorted(report.problems) == sorted(["train_chunk_1.h5", "train_chunk_2.h5", stray])

        assert sweep_stale_temps(str(out)) == [dead.first_line]  # the flows call this first
        again = cache_flow(p)

        after = mtimes(out)
        assert after["train_chunk_0.h5"] == before["train_chunk_0.h5"]
        assert after["train_chunk_3.h5"] == before["train_chunk_3.h5"]
        assert after["train_chunk_1.h5"] != before["train_chunk_1.h5"]
        assert after["train_chunk_2.h5"] != before["train_chunk_2.h5"]
        for i in range(4):
            assert filecmp.cmp(out / f"train_chunk_{i}.h5", originals / f"train_chunk_{i}.h5", shallow=False)
        assert again["summary"]["samples_written"] == len(c4_rows)
        assert hidden(out) == [live.first_line.rsplit("/", 1)[-1]]  # a live writer's temp is never swept
        assert verify_output(str(out)).ok
    finally:
        kill(live)
    assert sweep_stale_temps(str(out)) == [live.first_line]
    assert hidden(out) == [] and verify_output(str(out)).ok
