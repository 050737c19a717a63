"""The local Prefect server the CLI keeps between runs (flows/local_server.py, flows/server_keeper.py).

One real kept server for the module, started by the first CLI run the way a user's first run
starts it, in its own PREFECT_HOME and cache dir; every CLI run is a fresh process without
PREFECT_API_URL, as a user types it. The last test stops it and checks both pids are gone.
"""

from __future__ import annotations

import hashlib
import http.server
import json
import os
import subprocess
import sys
import threading
import time
import urllib.request

import pytest
from typer.testing import CliRunner

from flows import local_server, server_keeper
from flows.cli import app
from tests.conftest import free_port, load_json_or_jsonl
from tests.flows.test_cache_flow import write_chunks

CLI = [sys.executable, "-c", "from flows.cli import main; main()"]


def clean_env(home, **extra) -> dict:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("PREFECT_", "H5PIPE_SERVER"))}
    env.update(PREFECT_HOME=str(home / "prefect-home"), H5PIPE_CACHE_DIR=str(home / "cache"), **extra)
    return env


def h5pipe(env, *args) -> subprocess.CompletedProcess:
    return subprocess.run([*CLI, *args], env=env, capture_output=True, text=True, timeout=600)


def cache_args(inputs, output, gpt2_path) -> list[str]:
    tokenizer = ["--tokenizer", str(gpt2_path), "--eos-token", "<|endoftext|>", "--pad-token", "<|endoftext|>"]
    return ["cache", "--input", str(inputs), "--output", str(output), *tokenizer, "--pack-size", "256"]


def digests(folder) -> dict[str, str]:
    return {p.name: hashlib.sha256(p.read_bytes()).hexdigest() for p in sorted(folder.glob("*.h5"))}


class Kept:
    """The module's world: its environment, input chunks, and the first run that started the server."""

    def __init__(self, home, inputs, gpt2_path):
        self.home, self.inputs, self.gpt2_path = home, inputs, gpt2_path
        self.env = clean_env(home, PREFECT_SERVER_API_PORT=str(free_port()))
        self.first = h5pipe(self.env, *cache_args(inputs, home / "first", gpt2_path))
        self.record = self.read()

    def read(self):
        os.environ["H5PIPE_CACHE_DIR"], saved = self.env["H5PIPE_CACHE_DIR"], os.environ.get("H5PIPE_CACHE_DIR")
        try:
            return local_server.read_record()
        finally:
            os.environ["H5PIPE_CACHE_DIR"] = saved or ""
            if saved is None:
                del os.environ["H5PIPE_CACHE_DIR"]


@pytest.fixture(scope="module")
def kept(tmp_path_factory, llamafactory, gpt2_path):
    home = tmp_path_factory.mktemp("kept")
    inputs = write_chunks(home / "in", load_json_or_jsonl(llamafactory / "c4_demo.jsonl"), 2)
    world = Kept(home, inputs, gpt2_path)
    yield world
    h5pipe(world.env, "server", "stop")  # idempotent: the last test stops it already


def test_a_first_run_starts_the_kept_server_and_says_so(kept):
    assert kept.first.returncode == 0, kept.first.stderr
    assert kept.record is not None and local_server.pid_alive(kept.record.pid)
    assert local_server.pid_alive(kept.record.server_pid)
    assert f"started a local Prefect server at {kept.record.url}" in kept.first.stderr
    assert "Starting temporary server" not in kept.first.stderr
    assert kept.record.url == f"http://127.0.0.1:{kept.env['PREFECT_SERVER_API_PORT']}"


def api_post(api_url: str, path: str, body: dict):
    request = urllib.request.Request(
        f"{api_url}/{path}", data=json.dumps(body).encode(), headers={"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=10) as response:
        return json.loads(response.read())


def logs_on(api_url: str) -> list[dict]:
    return api_post(api_url, "logs/filter", {"limit": 200, "sort": "TIMESTAMP_DESC"})  # the latest runs' lines


def test_a_second_run_reuses_it_and_both_runs_are_on_it(kept):
    second = h5pipe(kept.env, *cache_args(kept.inputs, kept.home / "second", kept.gpt2_path))
    assert second.returncode == 0, second.stderr
    assert "started a local" not in second.stderr and "Starting temporary server" not in second.stderr
    assert kept.read() == kept.record  # same keeper, same server
    count = api_post(kept.record.api_url, "flow_runs/count", {"flows": {"name": {"any_": ["h5pipe-cache"]}}})
    assert int(count) == 2  # both runs are visible in its UI


WORKER_RUNNERS = {
    "processes": ("--task-runner", "processes"),
    "dask-processes": ("--task-runner", "dask", "--dask-workers", "processes"),
}


@pytest.mark.parametrize("runner", sorted(WORKER_RUNNERS))
def test_worker_processes_log_to_the_kept_server_and_start_no_other(kept, runner):
    # a process pool's workers send their log lines through a queue to a thread of the runner in
    # the parent, which sent them to a temporary server of its own when the run's API was set
    # after Prefect loaded (flows/process_pool.py); Dask's workers send their own
    output = kept.home / runner
    run = h5pipe(kept.env, *cache_args(kept.inputs, output, kept.gpt2_path), *WORKER_RUNNERS[runner])
    assert run.returncode == 0, run.stderr
    assert "Starting temporary server" not in run.stderr, run.stderr[-3000:]
    chunk_lines = {
        log["message"].split(":")[0]
        for log in logs_on(kept.record.api_url)
        if log["task_run_id"] and log["message"].startswith(str(output))
    }
    assert chunk_lines == {str(output / f"train_chunk_{i}.h5") for i in range(2)}


def test_outputs_are_byte_identical_with_and_without_the_reused_server(kept, prefect_harness):
    # in-process against the session's test server: Prefect's API as configured, no kept server
    result = CliRunner().invoke(app, cache_args(kept.inputs, kept.home / "harness", kept.gpt2_path))
    assert result.exit_code == 0, result.output
    assert (kept.home / "second").is_dir(), "runs after test_a_second_run_reuses_it"
    expected = digests(kept.home / "harness")
    assert len(expected) == 2
    assert digests(kept.home / "first") == expected
    assert digests(kept.home / "second") == expected


def test_status_names_the_server(kept):
    shown = h5pipe(kept.env, "server", "status")
    assert shown.returncode == 0
    assert f"{kept.record.url}: answering; keeper pid {kept.record.pid}" in shown.stdout


def test_a_server_at_prefect_server_starts_address_is_reused(kept, tmp_path):
    # no h5pipe record in this cache dir, but a server answers at PREFECT_SERVER_API_PORT
    env = clean_env(tmp_path, PREFECT_SERVER_API_PORT=str(kept.record.port), H5PIPE_SERVER="reuse")
    probe = "from flows.local_server import api_for_run; print(api_for_run())"
    out = subprocess.run([sys.executable, "-c", probe], env=env, capture_output=True, text=True, check=True)
    assert out.stdout.strip() == kept.record.api_url


def test_stop_ends_the_keeper_and_the_server_leaving_no_process(kept):
    stopped = h5pipe(kept.env, "server", "stop")
    assert stopped.returncode == 0, stopped.stderr
    assert f"stopped the local Prefect server at {kept.record.url}" in stopped.stdout
    assert not local_server.pid_alive(kept.record.pid)
    assert not local_server.pid_alive(kept.record.server_pid)
    assert kept.read() is None
    assert "no local Prefect server" in h5pipe(kept.env, "server", "status").stdout


# ---- without a Prefect server ------------------------------------------------------------------


def test_a_configured_api_is_used_as_it_is(prefect_harness):
    assert local_server.api_for_run() is None  # the test harness set PREFECT_API_URL


def test_an_unknown_mode_is_refused_naming_the_choices(monkeypatch):
    monkeypatch.setenv("H5PIPE_SERVER", "forever")
    with pytest.raises(local_server.ServerError, match="auto, reuse, temporary"):
        local_server.server_mode()


def test_nothing_answers_on_a_closed_port():
    assert not local_server.answers(f"http://127.0.0.1:{free_port()}/api", timeout=0.2)


class CountHandler(http.server.BaseHTTPRequestHandler):
    active = 0

    def do_POST(self):  # noqa: N802 - http.server's name
        self.rfile.read(int(self.headers["Content-Length"]))
        self.send_response(200)
        self.end_headers()
        self.wfile.write(str(CountHandler.active).encode())

    def log_message(self, *args):
        pass


@pytest.fixture()
def count_api():
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), CountHandler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/api"
    server.shutdown()


def test_the_keeper_waits_while_a_run_is_active_then_stops_when_idle(tmp_path, count_api):
    stand_in = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])  # the 'server'
    try:
        CountHandler.active = 1
        done = threading.Event()
        watcher = threading.Thread(
            target=lambda: (server_keeper.watch(stand_in, count_api, tmp_path, 0.2, time.time(), poll=0.05), done.set())
        )
        watcher.start()
        assert not done.wait(1.0)  # idle long past 0.2 s, but a run is active
        CountHandler.active = 0
        assert done.wait(5.0)
        watcher.join()
    finally:
        stand_in.kill()
        stand_in.wait()
