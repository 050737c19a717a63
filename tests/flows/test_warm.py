"""The warm h5pipe process (flows/entry.py, flows/warm/), with real processes throughout.

One world for the module: its own PREFECT_HOME, cache dir and kept-server port, ``H5PIPE_WARM=on``.
Its first CLI run is cold (it starts the kept server and leaves a warm process); the tests then
prove which later runs the warm process served by its ``served`` count, compare the bytes with
cold runs, and end by stopping everything and checking every pid is gone.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from flows.server_record import pid_alive
from flows.warm.fingerprint import fingerprint
from pipeline_core.commit.lock import FolderLock
from tests.conftest import free_port, load_json_or_jsonl
from tests.flows.test_cache_flow import write_chunks
from tests.flows.test_local_server import cache_args, clean_env, digests

CLI = [sys.executable, "-c", "from flows.entry import main; main()"]
HEAVY = ("prefect", "typer", "click", "pydantic", "pipeline_core", "numpy", "tokenizers", "h5py", "rich")


def h5pipe(env, *args, **extra) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env={**env, **extra}, capture_output=True, text=True, timeout=600)


class World:
    def __init__(self, home: Path, inputs: Path, gpt2_path: Path) -> None:
        self.home, self.inputs, self.gpt2_path = home, inputs, gpt2_path
        self.env = clean_env(home, PREFECT_SERVER_API_PORT=str(free_port()), H5PIPE_WARM="on")
        self.state = Path(self.env["H5PIPE_CACHE_DIR"]) / "prefect-server"
        self.n = 0
        self.first = self.cache()
        self.warm = self.wait_for_warm()

    def cache(self, *, inputs: Path | None = None, **extra) -> tuple[subprocess.CompletedProcess, Path]:
        self.n += 1
        output = self.home / f"out-{self.n}"
        done = h5pipe(self.env, *cache_args(inputs or self.inputs, output, self.gpt2_path), **extra)
        return done, output

    def records(self) -> list[dict]:
        state = Path(self.env["H5PIPE_CACHE_DIR"]) / "prefect-server"
        found = []
        for path in sorted(state.glob("warm-*.json")):
            try:
                found.append(json.loads(path.read_text()))
            except ValueError:  # being replaced
                continue
        return found

    def record(self, pid: int) -> dict:
        return next(r for r in self.records() if r["pid"] == pid)

    def wait_for_warm(self, other_than: tuple[int, ...] = (), fingerprint: str | None = None, timeout: float = 180):
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            ready = [
                r for r in self.records()
                if r["pid"] not in other_than and Path(r.get("socket", "/-")).exists()
                and r["fingerprint"] == (fingerprint or r["fingerprint"])
            ]  # fmt: skip
            if ready:
                return ready[0]
            time.sleep(0.2)
        raise AssertionError(f"no warm process came up; log: {self.read_log()}")

    def read_log(self) -> str:
        log = Path(self.env["H5PIPE_CACHE_DIR"]) / "prefect-server" / "warm.log"
        return log.read_text() if log.exists() else "(none)"


@pytest.fixture(scope="module")
def world(tmp_path_factory, llamafactory, gpt2_path):
    home = tmp_path_factory.mktemp("warm")
    inputs = write_chunks(home / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 2)
    w = World(home, inputs, gpt2_path)
    yield w
    h5pipe(w.env, "server", "stop")  # idempotent: the last test stops it already


def served(world: World) -> int:
    return world.record(world.warm["pid"])["served"]


def test_the_first_run_is_cold_and_leaves_a_warm_process_with_one_thread(world):
    done, _ = world.first
    assert done.returncode == 0, done.stderr
    assert world.warm["served"] == 0
    assert world.warm["threads"] == 1
    assert pid_alive(world.warm["pid"])


def test_a_second_run_is_served_by_the_warm_process_and_writes_the_same_bytes(world):
    before = served(world)
    warm, warm_out = world.cache()
    assert warm.returncode == 0, warm.stderr
    assert served(world) == before + 1
    cold, cold_out = world.cache(H5PIPE_WARM="off")
    assert cold.returncode == 0, cold.stderr
    assert served(world) == before + 1
    assert digests(warm_out) == digests(cold_out) == digests(world.first[1])
    assert digests(warm_out)
    assert json.loads(warm.stdout)["tokens_written"] == json.loads(cold.stdout)["tokens_written"]


def test_a_config_error_exits_2_through_the_warm_process_as_cold(world, tmp_path):
    bad = [
        "cache", "--input", str(world.inputs), "--output", str(tmp_path / "o"), "--tokenizer",
        str(tmp_path / "missing" / "tokenizer.json"), "--eos-token", "<|endoftext|>",
    ]  # fmt: skip
    before = served(world)
    warm = h5pipe(world.env, *bad)
    assert served(world) == before + 1
    cold = h5pipe(world.env, *bad, H5PIPE_WARM="off")
    assert (warm.returncode, cold.returncode) == (2, 2), (warm.stderr, cold.stderr)
    assert "invalid config" in warm.stderr and "invalid config" in cold.stderr


def test_status_shows_the_warm_process(world):
    shown = h5pipe(world.env, "server", "status").stdout
    assert f"warm h5pipe process pid {world.warm['pid']}, fingerprint {world.warm['fingerprint']}" in shown


def test_a_changed_fingerprint_does_not_use_the_old_warm_process(world):
    before = served(world)
    done, _ = world.cache(HF_HUB_OFFLINE="1")
    assert done.returncode == 0, done.stderr
    assert served(world) == before
    other = world.wait_for_warm(other_than=(world.warm["pid"],))
    assert other["fingerprint"] != world.warm["fingerprint"]


def start_warm_run(world: World, output: Path | None = None, *extra: str) -> tuple[subprocess.Popen, int]:
    """A cache run through the warm process, and its child's pid once the warm process lists it."""
    world.n += 1
    output = output or world.home / f"out-{world.n}"
    run = subprocess.Popen(
        [*CLI, *cache_args(world.inputs, output, world.gpt2_path), *extra],
        env=world.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    deadline = time.monotonic() + 120
    while run.poll() is None and time.monotonic() < deadline:
        children = world.record(world.warm["pid"])["children"]
        if children:
            return run, children[0]
        time.sleep(0.01)
    raise AssertionError("the run ended before its child could be seen")


def test_a_run_killed_by_a_signal_exits_128_plus_it_with_a_message(world):
    before = served(world)
    run, child = start_warm_run(world)
    os.kill(child, signal.SIGKILL)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGKILL
    assert f"the run (pid {child}) was killed by signal SIGKILL" in err
    assert served(world) == before + 1


def test_sigterm_on_the_client_reaches_the_run(world):
    run, child = start_warm_run(world)
    run.send_signal(signal.SIGTERM)
    _, err = run.communicate(timeout=60)
    assert run.returncode == 128 + signal.SIGTERM, err
    assert f"the run (pid {child}) was killed by signal SIGTERM" in err
    assert not pid_alive(child)


def process_state(pid: int) -> str:
    """R, S, T (stopped)... from /proc; "gone" once it exited."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def wait_for_state(pids: tuple[int, ...], wanted, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if all(wanted(process_state(pid)) for pid in pids):
            return
        time.sleep(0.02)
    raise AssertionError(f"states {[process_state(p) for p in pids]} after {timeout} s")


def test_ctrl_z_stops_the_run_with_the_client_and_sigcont_resumes_both(world):
    # the run waits for its output folder's lock, which this test holds until the run was stopped
    # and resumed: however fast the run, it cannot end before the stop reaches it (a run that was
    # only long enough ended first once, in CI, when small chunks got cheaper)
    output = world.home / "out-held"
    output.mkdir()
    with FolderLock(str(output)):
        run, child = start_warm_run(world, output, "--lock-timeout", "120")
        run.send_signal(signal.SIGTSTP)
        wait_for_state((run.pid, child), lambda state: state == "T")
        time.sleep(0.5)
        assert process_state(child) == "T"  # still stopped: nothing ran on behind the stopped client
        run.send_signal(signal.SIGCONT)
        wait_for_state((child,), lambda state: state != "T")
    _, err = run.communicate(timeout=120)
    assert run.returncode == 0, err
    assert len(list(output.glob("*.h5"))) == len(list(world.inputs.glob("*.jsonl")))


def test_the_client_imports_nothing_heavy(world):
    probe = (
        "import sys; from flows.entry import _warm_fingerprint; from flows.warm.client import connect; "
        "fp = _warm_fingerprint(['h5pipe', 'cache']); connect(fp); print(' '.join(sorted(sys.modules)))"
    )
    done = subprocess.run([sys.executable, "-c", probe], env=world.env, capture_output=True, text=True, check=True)
    heavy = [m for m in done.stdout.split() if m.split(".")[0] in HEAVY]
    assert heavy == []


def test_a_killed_warm_process_means_a_cold_run_not_a_hang_and_stale_code_is_retired(world):
    # a stand-in for a warm process of this code folder whose files have changed since it started:
    # the new warm process sends it SIGUSR1 (retire), whose default action ends `sleep`
    stale = subprocess.Popen(["sleep", "300"])
    mine = world.record(world.warm["pid"])
    fake = {**mine, "pid": stale.pid, "fingerprint": "0" * 16, "code": "stale", "socket": "/nonexistent"}
    (world.state / f"warm-{'0' * 16}.json").write_text(json.dumps(fake))
    os.kill(world.warm["pid"], signal.SIGKILL)
    deadline = time.monotonic() + 30
    while pid_alive(world.warm["pid"]) and time.monotonic() < deadline:
        time.sleep(0.05)
    done, output = world.cache()
    assert done.returncode == 0, done.stderr
    assert digests(output) == digests(world.first[1])
    world.warm = world.wait_for_warm(other_than=(world.warm["pid"],), fingerprint=world.warm["fingerprint"])
    assert stale.wait(timeout=30) == -signal.SIGUSR1


def test_stop_ends_the_server_and_every_warm_process_leaving_no_pid(world):
    world.cache(TOKENIZERS_PARALLELISM="true")  # a new fingerprint: its warm process starts now
    starting = [json.loads(p.read_text()) for p in world.state.glob("starting-warm-*.json")]
    pids = [r["pid"] for r in [*world.records(), *starting] if pid_alive(r["pid"])]
    server = json.loads((Path(world.env["H5PIPE_CACHE_DIR"]) / "prefect-server" / "server.json").read_text())
    assert len(pids) >= 3  # the module's, the changed fingerprint's and the one starting
    stopped = h5pipe(world.env, "server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    for pid in pids:
        assert f"stopped the warm h5pipe process pid {pid}" in stopped.stdout
    alive = [p for p in (*pids, server["pid"], server["server_pid"]) if pid_alive(p)]
    assert alive == []
    assert world.records() == []
    assert list(world.state.glob("starting-warm-*.json")) == []
    assert "no warm h5pipe process is running" in h5pipe(world.env, "server", "status").stdout


def test_the_fingerprint_follows_the_environment_and_the_cwd_config(tmp_path):
    base = {"HOME": str(tmp_path), "PATH": "/usr/bin"}
    here = fingerprint(base, str(tmp_path))
    assert fingerprint({**base, "PATH": "/bin"}, str(tmp_path)) == here  # not read at import time
    assert fingerprint({**base, "H5PIPE_WARM": "on"}, str(tmp_path)) == here
    assert fingerprint({**base, "PREFECT_API_URL": "http://x/api"}, str(tmp_path)) != here
    assert fingerprint({**base, "TOKENIZERS_PARALLELISM": "false"}, str(tmp_path)) != here
    (tmp_path / "prefect.toml").write_text("[logging]\nlevel = 'DEBUG'\n")
    assert fingerprint(base, str(tmp_path)) != here


def test_the_fingerprint_changes_with_the_code(tmp_path, monkeypatch):
    import flows.warm.fingerprint as module

    monkeypatch.setattr(module, "__file__", str(tmp_path / "flows" / "warm" / "fingerprint.py"))
    (tmp_path / "flows").mkdir()
    code = tmp_path / "flows" / "cli.py"
    code.write_text("a = 1\n")
    before = fingerprint({}, str(tmp_path))
    code.write_text("a = 22\n")
    assert fingerprint({}, str(tmp_path)) != before


def test_warm_is_off_with_the_temporary_server_unless_asked(monkeypatch):
    from flows.warm import state

    monkeypatch.setenv("H5PIPE_SERVER", "temporary")
    monkeypatch.delenv("H5PIPE_WARM", raising=False)
    assert not state.enabled()
    monkeypatch.setenv("H5PIPE_WARM", "on")
    assert state.enabled()
    monkeypatch.setenv("H5PIPE_WARM", "off")
    monkeypatch.delenv("H5PIPE_SERVER")
    assert not state.enabled()
    monkeypatch.setenv("H5PIPE_WARM", "sometimes")
    with pytest.raises(ValueError, match="auto"):
        state.mode()


def test_a_run_the_warm_process_forks_may_use_gigatokens_pool():
    """The warm process forks each run with one thread, so no gigatoken pool can be lost in the fork:
    where h5pipe wants the pool (here by its setting; by default on 3 cores or more), a served run
    gets it, where gigatoken's own rule would encode every forked run on one thread."""
    probe = (
        "import os, sys; from flows.warm.zygote import preload; preload(); "
        "assert len(os.listdir('/proc/self/task')) == 1; pid = os.fork()\n"
        "if pid == 0:\n"
        "    from pipeline_core.tokenizer.encode_pool import encode_parallel; print(encode_parallel(), flush=True)\n"
        "    os._exit(0)\n"
        "os.waitpid(pid, 0)"
    )
    env = {**os.environ, "H5PIPE_GIGATOKEN_PARALLEL": "1"}
    done = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "True"


class _Served(Exception):
    pass


@pytest.mark.parametrize(
    ("threads", "said"), [(None, "this system does not list a process's threads"), (2, "2 threads")]
)
def test_the_warm_process_serves_only_when_it_has_counted_one_thread(tmp_path, monkeypatch, capsys, threads, said):
    """A fork loses every thread but the caller's; where the count is unknown (no /proc/self/task)
    or above one, the warm process exits instead of serving, and says why in its log."""
    from flows.warm import zygote
    from pipeline_core.tokenizer import encode_pool

    class Warm:
        def __init__(self, *args) -> None:
            pass

        def serve(self) -> None:
            raise _Served

    monkeypatch.setenv("H5PIPE_CACHE_DIR", str(tmp_path))
    monkeypatch.setattr(zygote, "preload", lambda: None)
    monkeypatch.setattr(zygote, "Warm", Warm)
    monkeypatch.setattr(encode_pool, "thread_count", lambda: 1)
    with pytest.raises(_Served):  # the control: one thread counted, it serves
        zygote._main("f" * 16)
    monkeypatch.setattr(encode_pool, "thread_count", lambda: threads)
    zygote._main("e" * 16)
    assert f"not serving: {said}" in capsys.readouterr().out


def test_no_warm_process_where_the_system_does_not_list_threads(monkeypatch):
    from flows.warm import state
    from pipeline_core.tokenizer.encode_pool import thread_count

    monkeypatch.setenv("H5PIPE_WARM", "on")
    assert state.enabled()
    assert thread_count() >= 1
    isdir = os.path.isdir
    monkeypatch.setattr(os.path, "isdir", lambda path: path != "/proc/self/task" and isdir(path))
    monkeypatch.setattr(os, "listdir", lambda path: (_ for _ in ()).throw(FileNotFoundError(path)))
    assert not state.enabled()
    assert thread_count() is None
