"""The keeper of the local Prefect server (flows/local_server.py): ``python -m flows.server_keeper
PORT IDLE_SECONDS STATE_DIR``.

It runs ``prefect server start`` on 127.0.0.1:PORT as its child, writes the record once the
server answers, and stops the server, removes the record and exits when any of these happens:
SIGTERM or SIGINT (``h5pipe server stop``), the server exits, or IDLE_SECONDS passed since the
last run touched ``last-used`` while no flow run is pending or running on the server. It imports
no Prefect itself, so waiting costs nothing but a health check every few seconds.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

POLL_SECONDS = 5.0
STOP_SECONDS = 20.0
# Services an ad hoc run does not need (no schedules, no late-run marking) and analytics (no network here).
SERVER_FLAGS = ("--analytics-off", "--no-scheduler", "--no-late-runs")


def server_command(port: int) -> list[str]:
    return [
        sys.executable,
        "-m",
        "prefect",
        "server",
        "start",
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        *SERVER_FLAGS,
    ]


def start_server(port: int) -> subprocess.Popen:
    env = {k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"}
    env["PREFECT_SERVER_ANALYTICS_ENABLED"] = "false"
    return subprocess.Popen(server_command(port), stdin=subprocess.DEVNULL, env=env, preexec_fn=_die_with_keeper)


def _die_with_keeper() -> None:
    """In the server's process, before exec: SIGTERM it when the keeper dies, even by SIGKILL (Linux)."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6", use_errno=True).prctl(1, signal.SIGTERM)  # 1 = PR_SET_PDEATHSIG
    except (OSError, AttributeError):
        pass  # elsewhere the keeper's own stop is the only guard


def answers(api_url: str) -> bool:
    try:
        with urllib.request.urlopen(f"{api_url}/health", timeout=2) as response:
            return response.status == 200
    except OSError:
        return False


def active_runs(api_url: str) -> int:
    """Flow runs pending or running on the server (an unanswered count counts as one: keep going)."""
    body = json.dumps({"flow_runs": {"state": {"type": {"any_": ["PENDING", "RUNNING"]}}}}).encode()
    request = urllib.request.Request(
        f"{api_url}/flow_runs/count", data=body, headers={"Content-Type": "application/json"}
    )
    try:
        with urllib.request.urlopen(request, timeout=5) as response:
            return int(json.loads(response.read()))
    except (OSError, ValueError):
        return 1


def last_used(state: Path, started: float) -> float:
    try:
        return max(started, (state / "last-used").stat().st_mtime)
    except OSError:
        return started


def write_record(state: Path, record: dict) -> None:
    temp = state / "server.json.tmp"
    temp.write_text(json.dumps(record), encoding="utf-8")
    os.replace(temp, state / "server.json")


def remove_record(state: Path) -> None:
    """Remove the record only when it is this keeper's (a newer keeper may have written its own)."""
    path = state / "server.json"
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass


def stop_server(server: subprocess.Popen) -> None:
    if server.poll() is None:
        server.terminate()
        try:
            server.wait(STOP_SECONDS)
        except subprocess.TimeoutExpired:
            server.kill()
            server.wait()


class Stop(Exception):
    """Raised by the signal handler to leave the wait loop."""


def _on_signal(signum, frame) -> None:
    raise Stop()


def wait_until_up(server: subprocess.Popen, api_url: str) -> bool:
    while server.poll() is None:
        if answers(api_url):
            return True
        time.sleep(0.05)
    return False


def watch(
    server: subprocess.Popen, api_url: str, state: Path, idle_seconds: float, started: float, poll: float = POLL_SECONDS
) -> None:
    """Return when the server exited or has been idle for ``idle_seconds``."""
    while server.poll() is None:
        time.sleep(poll)
        if time.time() - last_used(state, started) >= idle_seconds and active_runs(api_url) == 0:
            return


def main(port: int, idle_seconds: float, state: Path) -> int:
    signal.signal(signal.SIGTERM, _on_signal)
    signal.signal(signal.SIGINT, _on_signal)
    server = start_server(port)
    url = f"http://127.0.0.1:{port}"
    try:
        if not wait_until_up(server, f"{url}/api"):
            return 1
        started = time.time()
        record = dict(
            url=url, pid=os.getpid(), server_pid=server.pid, port=port, idle_seconds=idle_seconds, started=started
        )
        write_record(state, record)
        watch(server, f"{url}/api", state, idle_seconds, started)
    except Stop:
        pass
    finally:
        signal.signal(signal.SIGTERM, signal.SIG_IGN)
        stop_server(server)
        remove_record(state)
    return 0


if __name__ == "__main__":  # pragma: no cover - the keeper's entry
    sys.exit(main(int(sys.argv[1]), float(sys.argv[2]), Path(sys.argv[3])))
