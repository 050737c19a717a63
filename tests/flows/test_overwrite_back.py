"""--overwrite back to earlier settings: a Prefect cache hit of the earlier settings is accepted only
while the folder still holds the very files that cache entry made, however the hits are checked."""

from __future__ import annotations

import hashlib

import pytest

import pipeline_core.commit.standing
from flows.cache_flow import cache_flow
from pipeline_core import read_attrs
from pipeline_core.commit.verify import verify_output
from tests.flows.test_cache_flow import params


def sha256s(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.h5"))}


@pytest.mark.parametrize("verify_hits", ["size", "sha256"])
def test_overwriting_back_rewrites_the_files_the_other_settings_left(
    gpt2_path, c4_chunks, tmp_path, monkeypatch, verify_hits
):
    out = tmp_path / "out"

    def run(pad_value: int, overwrite: bool = False) -> dict:
        run_options = {"verify_hits": verify_hits}
        p = params(gpt2_path, c4_chunks, out, pack_size=256, pad_value=pad_value, overwrite=overwrite, run=run_options)
        return cache_flow(p)

    run(0)
    written_with_0 = sha256s(out)
    run(7, overwrite=True)  # another pad value: every file rewritten, each of the same size
    assert set(sha256s(out).values()).isdisjoint(written_with_0.values())
    if verify_hits == "size":  # size mode never reads a stamped file to check a hit
        monkeypatch.setattr(pipeline_core.commit.standing, "file_digest", lambda *a, **k: pytest.fail("read"))
    back = run(0, overwrite=True)
    monkeypatch.undo()
    assert back["cached"] == [False, False, False]  # the pad-0 hits named files the pad-7 run had replaced
    assert sha256s(out) == written_with_0
    assert {read_attrs(str(h5))["pad_value"] for h5 in out.glob("*.h5")} == {0}
    assert [c["sha256"] for c in back["chunks"]] == list(written_with_0.values())
    assert verify_output(str(out)).ok
