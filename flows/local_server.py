"""The local Prefect server the CLI keeps between runs, so a run does not pay a server's start.

Without an API address, every Prefect process starts a temporary server of its own and stops it
at exit: measured 5-15 s of a 1 MB job on 2 busy cores (its imports, migrations check, services),
plus ~1.5 s of teardown. ``h5pipe`` commands that run a flow instead pick, in this order:

1. the API the user configured (``PREFECT_API_URL`` in the environment, a profile or prefect.toml):
   used as it is, nothing else happens;
2. the server ``h5pipe server start`` (or an earlier run) started, when its keeper process lives
   and the server answers; its record is ``<cache dir>/prefect-server/server.json``;
3. a server answering at ``prefect server start``'s address (``PREFECT_SERVER_API_HOST`` and
   ``_PORT``, by default http://127.0.0.1:4200);
4. else it starts the kept server (as ``h5pipe server start`` does) and uses it.

The kept server is Prefect's own ``prefect server start`` (UI included, scheduler, late-runs
service and analytics off: an ad hoc run needs none of them), run by a small keeper process
(flows/server_keeper.py) that stops it after ``H5PIPE_SERVER_IDLE_MINUTES`` (default 30) without
a run, or on ``h5pipe server stop``. Runs land in Prefect's usual database (``PREFECT_HOME``), so
they stay visible in the UI as with any server; the outputs never depend on which server ran.

``H5PIPE_SERVER=temporary`` keeps Prefect's own per-run temporary server (steps 2-4 skipped);
``H5PIPE_SERVER=reuse`` uses a running server (2, 3) but never starts one.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import sys
import time

from flows.env_switch import env_choice
from flows.server_record import (
    ServerRecord,
    answers,
    log_path,
    pid_alive,
    read_record,
    record_path,
    running_kept_server,
    state_dir,
    touch_used,
    used_path,
)

MODES = ("auto", "reuse", "temporary")
DEFAULT_IDLE_MINUTES = 30.0
START_TIMEOUT = 180.0  # a server start on 2 busy cores took up to 15 s; leave room


class ServerError(RuntimeError):
    """The kept server could not be started or stopped; the message says what to do."""


def default_address() -> str:
    """``prefect server start``'s address from the settings (127.0.0.1:4200 unless changed)."""
    from prefect.settings import get_current_settings

    api = get_current_settings().server.api
    host = "127.0.0.1" if api.host in ("0.0.0.0", "::", "") else api.host
    return f"http://{host}:{api.port}"


def configured_api_url() -> str | None:
    """The API address the user configured (environment, profile, prefect.toml), if any."""
    if os.environ.get("PREFECT_API_URL"):
        return os.environ["PREFECT_API_URL"]
    from prefect.settings import get_current_settings

    return get_current_settings().api.url


def server_mode() -> str:
    return env_choice("H5PIPE_SERVER", MODES, ServerError)


def idle_seconds_from_env() -> float:
    raw = os.environ.get("H5PIPE_SERVER_IDLE_MINUTES", str(DEFAULT_IDLE_MINUTES))
    try:
        minutes = float(raw)
    except ValueError:
        raise ServerError(f"H5PIPE_SERVER_IDLE_MINUTES={raw!r} is not a number of minutes") from None
    if minutes <= 0:
        raise ServerError(f"H5PIPE_SERVER_IDLE_MINUTES={raw!r} must be > 0; stop the server with `h5pipe server stop`")
    return 60 * minutes


# ---- choosing the API for a run ------------------------------------------------------------------


def api_for_run(announce=print) -> str | None:
    """The API a CLI run should use (see the module docstring), starting the kept server when
    needed; None when Prefect's own choice stands (a configured API, or ``temporary``)."""
    mode = server_mode()
    if mode == "temporary" or configured_api_url():
        return None
    found = running_kept_server()
    if found:
        return found.api_url
    if answers(f"{default_address()}/api", timeout=0.3):
        return f"{default_address()}/api"
    if mode == "reuse":
        return None
    record = start(idle_seconds_from_env())
    announce(
        f"h5pipe: started a local Prefect server at {record.url} (UI and API; pid {record.pid}); it stops "
        f"after {record.idle_seconds / 60:g} idle minutes or with `h5pipe server stop`"
    )
    return record.api_url


@contextlib.contextmanager
def using_api(api_url: str | None):
    """Point Prefect at ``api_url`` for the block (environment and settings), marking the kept
    server used at its start and end so idleness counts from the last run."""
    if api_url is None:
        yield
        return
    from prefect.settings import PREFECT_API_URL, temporary_settings

    os.environ["PREFECT_API_URL"] = api_url  # worker processes inherit it (flows/runners.py)
    touch_used()
    try:
        with temporary_settings({PREFECT_API_URL: api_url}):
            yield
    finally:
        touch_used()
        os.environ.pop("PREFECT_API_URL", None)


def free_port(preferred: int | None) -> int:
    """``preferred`` when it is free on 127.0.0.1, else any free port."""
    for port in ([preferred] if preferred else []) + [0]:
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
            return s.getsockname()[1]
    raise ServerError("no free port on 127.0.0.1 for the local Prefect server")


@contextlib.contextmanager
def start_lock():
    """One process at a time starts the kept server (two runs at once share the first's server)."""
    import fcntl

    state_dir().mkdir(parents=True, exist_ok=True)
    with open(state_dir() / "start.lock", "w") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def start(idle_seconds: float, port: int | None = None, timeout: float = START_TIMEOUT) -> ServerRecord:
    """Start the kept server (or return the one running) and wait until it answers."""
    with start_lock():
        found = running_kept_server()
        if found:
            return found
        keeper = spawn_keeper(free_port(port or _settings_port()), idle_seconds)
        return wait_until_up(keeper, timeout)


def _settings_port() -> int:
    from prefect.settings import get_current_settings

    return get_current_settings().server.api.port


def spawn_keeper(port: int, idle_seconds: float) -> subprocess.Popen:
    """The keeper, detached from this process (own session, output to the server log)."""
    with contextlib.suppress(FileNotFoundError):
        record_path().unlink()
    touch_used()
    log = open(log_path(), "ab")  # noqa: SIM115 - handed to the child, closed here after the fork
    try:
        return subprocess.Popen(
            [sys.executable, "-m", "flows.server_keeper", str(port), str(idle_seconds), str(state_dir())],
            stdin=subprocess.DEVNULL,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            env={k: v for k, v in os.environ.items() if k != "PREFECT_API_URL"},
        )
    finally:
        log.close()


def wait_until_up(keeper: subprocess.Popen, timeout: float) -> ServerRecord:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if keeper.poll() is not None:
            raise ServerError(f"the local Prefect server exited with code {keeper.returncode}; see {log_path()}")
        record = read_record()
        if record and record.pid == keeper.pid and answers(record.api_url):
            return record
        time.sleep(0.05)
    stop_pids(keeper.pid, None)
    raise ServerError(f"the local Prefect server did not answer within {timeout:.0f} s; see {log_path()}")


def stop(timeout: float = 30.0) -> ServerRecord | None:
    """Stop the kept server and its keeper; the record of what was stopped, or None if none ran."""
    record = read_record()
    if record is None or not pid_alive(record.pid):
        with contextlib.suppress(FileNotFoundError):
            record_path().unlink()
        return None
    stop_pids(record.pid, record.server_pid, timeout)
    with contextlib.suppress(FileNotFoundError):
        record_path().unlink()
    return record


def stop_pids(keeper_pid: int, server_pid: int | None, timeout: float = 30.0) -> None:
    """SIGTERM the keeper (it stops its server and exits); SIGKILL whatever still runs at the deadline."""
    with contextlib.suppress(ProcessLookupError):
        os.kill(keeper_pid, signal.SIGTERM)
    pids = [p for p in (keeper_pid, server_pid) if p]
    deadline = time.monotonic() + timeout
    while any(pid_alive(p) for p in pids) and time.monotonic() < deadline:
        _reap(keeper_pid)
        time.sleep(0.05)
    for pid in pids:
        with contextlib.suppress(ProcessLookupError):
            if pid_alive(pid):
                os.kill(pid, signal.SIGKILL)
    _reap(keeper_pid)


def _reap(pid: int) -> None:
    """Collect ``pid`` when it is this process's child (the keeper started by ``start`` here)."""
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def status() -> str:
    record = read_record()
    if record is None or not pid_alive(record.pid):
        return "no local Prefect server kept by h5pipe is running"
    state = "answering" if answers(record.api_url) else "not answering (starting or stopping)"
    idle = time.time() - _last_used(record)
    return (
        f"local Prefect server at {record.url}: {state}; keeper pid {record.pid}, server pid {record.server_pid}; "
        f"idle {idle / 60:.1f} of {record.idle_seconds / 60:g} minutes; log {log_path()}"
    )


def _last_used(record: ServerRecord) -> float:
    try:
        return max(record.started, used_path().stat().st_mtime)
    except OSError:
        return record.started
