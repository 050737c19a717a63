"""One writer per output folder: an atomic lock with owner, heartbeat and safe stale breaking (defect 2)."""

from __future__ import annotations

import json
import subprocess
import sys
import threading

import pytest

from pipeline_core.commit.lock import LOCK, FolderLock, FolderLocked, Holder
from pipeline_core.storage.fs import host_id


@pytest.fixture(params=["local", "s3"])
def folder(request, tmp_path):
    if request.param == "local":
        return str(tmp_path / "out"), None
    bucket, options = request.getfixturevalue("s3_bucket")
    return f"{bucket}/out", options


def test_a_second_holder_is_refused_naming_the_first(folder):
    url, options = folder
    with FolderLock(url, options):
        with pytest.raises(FolderLocked, match=rf"pid \d+ on .*{LOCK}"):
            FolderLock(url, options).acquire()
    with FolderLock(url, options):  # released: free again
        pass


def test_only_one_of_many_racing_takers_wins(folder):
    url, options = folder
    won, lost = [], []
    barrier = threading.Barrier(8)

    def take() -> None:
        lock = FolderLock(url, options)
        barrier.wait()
        try:
            lock.acquire()
            won.append(lock)
        except FolderLocked:
            lost.append(lock)

    threads = [threading.Thread(target=take) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1 and len(lost) == 7
    won[0].release()


def dead_pid() -> int:
    done = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    return int(done.stdout)


def test_a_dead_holders_lock_is_broken_and_a_live_ones_is_not(folder):
    from pipeline_core.storage.fs import join_url, url_to_fs

    url, options = folder
    fs, path = url_to_fs(join_url(url, LOCK), options)
    fs.makedirs(path.rsplit("/", 1)[0], exist_ok=True)
    gone = Holder(host_id(), dead_pid(), 0.0, "a" * 32)
    fs.pipe_file(path, gone.to_json())
    with FolderLock(url, options) as lock:
        assert json.loads(fs.cat_file(path))["token"] == lock.holder.token
    alive = Holder("0" * 8, 1, 0.0, "b" * 32)  # another host, heartbeat just now
    fs.pipe_file(path, alive.to_json())
    with pytest.raises(FolderLocked):
        FolderLock(url, options).acquire()
    with FolderLock(url, options, stale_after=-1):  # no heartbeat for longer than stale_after
        pass


def test_waiting_takes_the_lock_once_released(folder):
    url, options = folder
    first = FolderLock(url, options)
    first.acquire()
    threading.Timer(1.0, first.release).start()
    with FolderLock(url, options, timeout=30):
        pass
