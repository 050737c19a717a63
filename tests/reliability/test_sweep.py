"""Sweeping temps: only those whose writer is gone; never a live writer's, never a published file."""

from __future__ import annotations

import os
import signal
import subprocess
import time

from pipeline_core.commit.sweep import DEFAULT_MAX_AGE, stale_temps, sweep_local_staging, sweep_stale_temps
from pipeline_core.storage.fs import host_id, local_staging
from tests.reliability.helpers import hidden, kill, start_worker

DAY = 24 * 3600


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def touch(path, age: float = 0.0, content: bytes = b"x"):
    path.write_bytes(content)
    then = time.time() - age
    os.utime(path, (then, then))
    return path


def test_dead_writers_temp_is_swept_live_writers_is_kept(tmp_path):
    dead = start_worker("hold-temp", tmp_path / "a.h5")
    live = start_worker("hold-temp", tmp_path / "b.h5")
    kill(dead)
    try:
        assert sweep_stale_temps(str(tmp_path)) == [dead.first_line]
        assert hidden(tmp_path) == [os.path.basename(live.first_line)]
    finally:
        kill(live)
    assert sweep_stale_temps(str(tmp_path)) == [live.first_line]


def test_a_killed_but_unreaped_writer_counts_as_gone(tmp_path):
    zombie = start_worker("hold-temp", tmp_path / "a.h5")
    zombie.send_signal(signal.SIGKILL)
    time.sleep(0.5)  # not waited for: the process is a zombie until reaped
    try:
        assert sweep_stale_temps(str(tmp_path)) == [zombie.first_line]
    finally:
        zombie.wait()


def test_this_process_own_temp_is_kept(tmp_path):
    with local_staging(str(tmp_path / "out.h5"), suffix=".h5") as tmp:
        touch(tmp_path / os.path.basename(tmp))
        assert sweep_stale_temps(str(tmp_path)) == []
    assert os.listdir(tmp_path) == ["out.h5"]


def test_a_reused_pid_does_not_keep_a_temp_alive(tmp_path):
    # our own pid, but the temp was last written a day before this process started: another writer's
    stale = touch(tmp_path / f".x.h5.tmp-{host_id()}-{os.getpid()}-0123abcd.h5", age=DAY)
    assert sweep_stale_temps(str(tmp_path)) == [str(stale)]


def test_temps_that_name_no_checkable_writer_go_by_age(tmp_path):
    names = [f".a.h5.tmp-00000000-{dead_pid()}-0123abcd.h5", ".b.h5.tmp-0123abcd.h5"]  # other host; old name
    for name in names:
        touch(tmp_path / name)
    assert sweep_stale_temps(str(tmp_path)) == []  # recent: the writer may be alive elsewhere
    for name in names:
        touch(tmp_path / name, age=DEFAULT_MAX_AGE + 60)
    assert sweep_stale_temps(str(tmp_path)) == [str(tmp_path / n) for n in sorted(names)]


def test_a_megatron_staging_folder_goes_when_nothing_in_it_changed_for_max_age(tmp_path):
    staging = tmp_path / ".c4.megatron-tmp-0123abcd"
    staging.mkdir()
    touch(staging / "c4_sequence_document.bin.tmp", age=0)
    os.utime(staging, (time.time() - DAY, time.time() - DAY))
    assert sweep_stale_temps(str(tmp_path), max_age=3600) == []  # a writer appended a moment ago
    touch(staging / "c4_sequence_document.bin.tmp", age=DAY)
    os.utime(staging, (time.time() - DAY, time.time() - DAY))
    assert sweep_stale_temps(str(tmp_path), max_age=3600) == [str(staging)]
    assert not staging.exists()


def test_published_files_and_other_hidden_files_are_never_touched(tmp_path):
    keep = ["train_chunk_0.h5", "h5pipe-manifest.json", ".hidden", ".x.h5.tmp-notours.h5", "x.h5.tmp-0123abcd"]
    for name in keep:
        touch(tmp_path / name, age=10 * DAY)
    (tmp_path / ".h5pipe").mkdir()
    assert sweep_stale_temps(str(tmp_path), max_age=0) == []
    assert sorted(os.listdir(tmp_path)) == sorted([*keep, ".h5pipe"])


def test_remote_and_missing_folders_have_nothing_to_sweep(tmp_path):
    assert sweep_stale_temps("memory://nothing/here") == []
    assert stale_temps(str(tmp_path / "missing")) == []


def test_local_staging_of_remote_uploads_is_swept_for_gone_writers(tmp_path):
    gone = touch(tmp_path / f"h5pipe-tmp-{host_id()}-{dead_pid()}-0123abcd-k2j4.h5")
    mine = touch(tmp_path / f"h5pipe-tmp-{host_id()}-{os.getpid()}-0123abcd-k2j4.h5")
    other = touch(tmp_path / "h5pipe-unrelated.h5", age=10 * DAY)
    assert sweep_local_staging(folder=str(tmp_path)) == [str(gone)]
    assert mine.exists() and other.exists()
