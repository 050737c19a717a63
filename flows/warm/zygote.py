"""The warm process: imports everything a run needs, then forks one child per run.

Started in the background by a cold run (or ``h5pipe server start``) as
``python -c <bootstrap> SYS_PATH_JSON FINGERPRINT``, in the client's environment and cwd, own
session, output to ``warm.log``. It:

1. holds ``warm-<fp>.lock`` for its life (a second one for the same fingerprint exits at once);
2. imports Prefect, the flows and pipeline_core (with numpy's BLAS pool held to one thread, so
   that no thread exists to be lost in a fork; h5pipe does no BLAS work);
3. refuses to serve (exits; runs stay cold) if the process has more than one thread;
4. binds ``warm-<fp>.sock`` (0600, in the 0700 state dir, same-uid peers only) and writes its
   record; then forks a child per request (flows/warm/child.py), reports each child's exit
   status to its client and SIGTERMs a child whose client went away;
5. exits after ``H5PIPE_SERVER_IDLE_MINUTES`` (default 30) with no run, on SIGTERM
   (``h5pipe server stop``: running children get SIGTERM too) or when its socket was replaced;
   on SIGUSR1 (sent by a newer warm process of the same code folder whose files changed) it takes
   no new run and exits when its running ones finished.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import selectors
import signal
import socket
import struct
import sys
import time

from flows.warm import protocol, state
from flows.warm.protocol import RELAYED

POLL_SECONDS = 5.0
STOP_SECONDS = 10.0
PRELOAD = ("prefect.main", "flows.cli", "flows.params", "flows.cli_options", "flows.cache_flow", "flows.export_flow",
           "flows.pipeline_flow", "flows.runs", "flows.failures", "flows.progress", "flows.local_server",
           "flows.dry_run", "flows.config_file", "flows.inspect", "flows.precheck", "pipeline_core.commit.verify",
           "pipeline_core.stages.merge")  # fmt: skip
# What a run imports on its way (measured: a 1 MB cache run imported these after the above, 1.5 s of
# it fastapi, through Prefect's parameter serialisation); optional ones may be missing. Not pyarrow (nor awkward,
# which imports it): its import starts a thread, which a fork would lose.
ALSO = ("prefect.flow_engine", "prefect.task_engine", "prefect.engine", "prefect.concurrency", "prefect.telemetry",
        "fastapi", "fastapi.encoders", "starlette.applications", "opentelemetry.metrics", "opentelemetry._logs",
        "importlib_metadata", "numpy.ma", "pydantic.color", "typer._adapters", "fsspec.parquet", "regex",
        "gigatoken", "graphviz", "encodings.idna", "http.cookies")  # fmt: skip
BOOTSTRAP = (
    "import sys, json; sys.path[:] = json.loads(sys.argv[1]); from flows.warm.zygote import main; main(sys.argv[2])"
)


def spawn(fingerprint: str, environ: dict) -> None:
    """Start the warm process of ``fingerprint`` in ``environ`` (the environment the fingerprint was
    taken of) in the background; it exits at once if one runs."""
    import subprocess

    folder = state.state_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    with open(state.log_path(), "ab") as log:
        started = subprocess.Popen(
            [sys.executable, "-c", BOOTSTRAP, json.dumps(sys.path), fingerprint],
            stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=environ,
        )  # fmt: skip
    # known at once, so that `h5pipe server stop` during its imports stops it too
    state.note_starting(started.pid, fingerprint)


def main(fingerprint: str) -> None:
    try:
        _main(fingerprint)
    finally:
        state.forget_starting(os.getpid())


def _main(fingerprint: str) -> None:
    folder = state.state_dir()
    folder.mkdir(parents=True, exist_ok=True, mode=0o700)
    lock = open(state.lock_path(fingerprint), "w")  # noqa: SIM115 - held until exit
    try:
        fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except OSError:
        return  # another warm process of this fingerprint runs or starts
    _absolute_cache_env()
    preload()
    threads = os.listdir("/proc/self/task") if os.path.isdir("/proc/self/task") else ["?"]
    if len(threads) != 1:
        _log(f"not serving: {len(threads)} threads after the imports (a fork would lose them)")
        return
    Warm(fingerprint, lock.fileno()).serve()


def _absolute_cache_env() -> None:
    """The loop runs in the state dir: a relative cache dir must keep naming the same folder."""
    for name in ("H5PIPE_CACHE_DIR", "XDG_CACHE_HOME"):
        value = os.environ.get(name)
        if value and value.strip().lower() not in ("none", "off") and not os.path.isabs(value):
            os.environ[name] = os.path.abspath(value)


def preload() -> None:
    """Import what every run command needs, with no BLAS thread pool started."""
    import importlib

    saved = os.environ.get("OPENBLAS_NUM_THREADS")
    os.environ["OPENBLAS_NUM_THREADS"] = "1"
    try:
        for name in PRELOAD:
            importlib.import_module(name)
        for name in ALSO:
            with contextlib.suppress(ImportError):
                importlib.import_module(name)
    finally:
        if saved is None:
            del os.environ["OPENBLAS_NUM_THREADS"]
        else:
            os.environ["OPENBLAS_NUM_THREADS"] = saved


def _log(message: str) -> None:
    print(f"{time.strftime('%Y-%m-%d %H:%M:%S')} warm pid {os.getpid()}: {message}", flush=True)


class Warm:
    """The serving loop: one listening socket, the live children and their clients' sockets."""

    def __init__(self, fingerprint: str, lock_fd: int) -> None:
        self.fingerprint, self.lock_fd = fingerprint, lock_fd
        self.children: dict[int, socket.socket] = {}
        self.served = 0
        self.started = self.last_used = time.time()
        self.idle_seconds = _idle_seconds()
        self.stopping = self.retiring = False
        from flows.warm.fingerprint import code_identity

        self.code_root, self.code = code_identity()
        self.selector = selectors.DefaultSelector()
        self.wake_r, self.wake_w = os.pipe()

    def serve(self) -> None:
        self.listener = self._bind()
        self._signals()
        self._record()
        state.forget_starting(os.getpid())
        self._retire_stale()
        _log(f"serving fingerprint {self.fingerprint} (idle stop after {self.idle_seconds / 60:g} min)")
        try:
            while not self._done():
                for key, _ in self.selector.select(POLL_SECONDS):
                    key.data()
        finally:
            self._stop()

    # ---- setup ---------------------------------------------------------------------------------

    def _bind(self) -> socket.socket:
        path = state.socket_path(self.fingerprint)
        temp = path.with_name(f".warm-{os.getpid()}.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        os.chdir(path.parent)  # relative names: a Unix socket address holds ~107 bytes at most
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp.name)
        listener.bind(temp.name)
        os.chmod(temp.name, 0o600)
        listener.listen(16)
        os.replace(temp.name, path.name)  # clients see a ready socket or none
        self.inode = os.stat(path.name).st_ino
        listener.setblocking(False)
        self.selector.register(listener, selectors.EVENT_READ, self._accept)
        return listener

    def _signals(self) -> None:
        os.set_blocking(self.wake_w, False)
        os.set_blocking(self.wake_r, False)
        signal.set_wakeup_fd(self.wake_w)
        signal.signal(signal.SIGCHLD, lambda *_: None)
        signal.signal(signal.SIGTERM, self._on_stop)
        signal.signal(signal.SIGINT, self._on_stop)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        signal.signal(signal.SIGUSR1, self._on_retire)
        self.selector.register(self.wake_r, selectors.EVENT_READ, self._woken)

    def _on_stop(self, *_args) -> None:
        self.stopping = True

    def _on_retire(self, *_args) -> None:
        """SIGUSR1: take no new run, exit once the running ones finished (they are not interrupted)."""
        self.retiring = True

    def _retire_stale(self) -> None:
        """Retire the warm processes of this code's place whose code has changed since they started:
        no client can use them again (the fingerprint holds the code), they would only hold memory."""
        for r in state.read_records():
            stale = r.get("code_root") == self.code_root and r.get("code") not in (None, self.code)
            if stale and r["pid"] != os.getpid():
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(r["pid"], signal.SIGUSR1)

    def _record(self) -> None:
        state.write_record(self.fingerprint, {
            "pid": os.getpid(), "fingerprint": self.fingerprint, "served": self.served, "running": len(self.children), "children": sorted(self.children),
            "threads": len(os.listdir("/proc/self/task")),
            "started": self.started, "last_used": self.last_used, "idle_seconds": self.idle_seconds,
            "socket": str(state.socket_path(self.fingerprint)), "cwd": os.environ.get("PWD", ""),
            "code_root": self.code_root, "code": self.code,
        })  # fmt: skip

    # ---- events --------------------------------------------------------------------------------

    def _woken(self) -> None:
        with contextlib.suppress(BlockingIOError):
            os.read(self.wake_r, 4096)
        self._reap()

    def _accept(self) -> None:
        try:
            conn, _ = self.listener.accept()
        except BlockingIOError:
            return
        conn.setblocking(True)
        conn.settimeout(5.0)
        try:
            if not _same_user(conn):
                raise ValueError("a peer of another user")
            request, fds = protocol.receive_request(conn)
        except (OSError, ValueError) as e:
            _log(f"refused a request: {e}")
            conn.close()
            return
        self._fork(conn, fds, request)

    def _fork(self, conn: socket.socket, fds: list[int], request: dict) -> None:
        close = [self.listener.fileno(), self.lock_fd, self.wake_r, self.wake_w, self.selector.fileno(),
                 *(c.fileno() for c in self.children.values())]  # fmt: skip
        # Signals are blocked across the fork: the child takes them only once its own handlers are
        # set (child.become); its process group exists before the client can signal it.
        held = signal.pthread_sigmask(signal.SIG_BLOCK, RELAYED)
        pid = os.fork()
        if pid == 0:
            from flows.warm.child import serve

            conn.settimeout(None)
            serve(conn, fds, request, close)
        with contextlib.suppress(OSError):
            os.setpgid(pid, pid)  # also set by the child; whichever runs first
        signal.pthread_sigmask(signal.SIG_SETMASK, held)
        for fd in fds:
            os.close(fd)
        self.children[pid] = conn
        self.served += 1
        self.last_used = time.time()
        protocol.send_line(conn, "pid", pid)
        self.selector.register(conn, selectors.EVENT_READ, lambda: self._client_readable(pid))
        self._record()

    def _client_readable(self, pid: int) -> None:
        """The client sends nothing after its request: readable means it went away."""
        conn = self.children.get(pid)
        if conn is None:
            return
        try:
            gone = conn.recv(1, socket.MSG_DONTWAIT) == b""
        except BlockingIOError:
            return
        except OSError:
            gone = True
        if gone:
            self.selector.unregister(conn)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)  # as a cold run dies with its terminal

    def _reap(self) -> None:
        while self.children:
            try:
                pid, status = os.waitpid(-1, os.WNOHANG)
            except ChildProcessError:
                return
            if pid == 0:
                return
            conn = self.children.pop(pid, None)
            if conn is not None:
                self._report(conn, status)
            self.last_used = time.time()
            self._record()

    def _report(self, conn: socket.socket, status: int) -> None:
        if os.WIFSIGNALED(status):
            protocol.send_line(conn, "signal", os.WTERMSIG(status))
        else:
            protocol.send_line(conn, "exit", os.waitstatus_to_exitcode(status))
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(conn)
        conn.close()

    # ---- ending --------------------------------------------------------------------------------

    def _done(self) -> bool:
        if self.stopping:
            return True
        if self.retiring:
            self._stop_listening()
            return not self.children
        if not self._socket_is_mine():
            _log("socket replaced or removed; exiting")
            return True
        return not self.children and time.time() - self.last_used >= self.idle_seconds

    def _socket_is_mine(self) -> bool:
        try:
            return os.stat(state.socket_path(self.fingerprint).name).st_ino == self.inode
        except OSError:
            return False

    def _stop_listening(self) -> None:
        if self.listener.fileno() == -1:
            return
        if self._socket_is_mine():
            with contextlib.suppress(OSError):
                os.unlink(state.socket_path(self.fingerprint).name)
        with contextlib.suppress(KeyError, ValueError):
            self.selector.unregister(self.listener)
        self.listener.close()

    def _stop(self) -> None:
        self._stop_listening()
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGTERM)
        deadline = time.monotonic() + STOP_SECONDS
        while self.children and time.monotonic() < deadline:
            self._reap()
            time.sleep(0.05)
        for pid in list(self.children):
            with contextlib.suppress(ProcessLookupError):
                os.killpg(pid, signal.SIGKILL)
        self._reap()
        _remove_record(self.fingerprint)
        _log(f"stopped after serving {self.served} run(s)")


def _same_user(conn: socket.socket) -> bool:
    creds = conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, struct.calcsize("3i"))
    _pid, uid, _gid = struct.unpack("3i", creds)
    return uid == os.getuid()


def _idle_seconds() -> float:
    from flows.local_server import ServerError, idle_seconds_from_env

    try:
        return idle_seconds_from_env()
    except ServerError:
        from flows.local_server import DEFAULT_IDLE_MINUTES

        return 60 * DEFAULT_IDLE_MINUTES


def _remove_record(fingerprint: str) -> None:
    path = state.record_path(fingerprint)
    try:
        if json.loads(path.read_text(encoding="utf-8")).get("pid") == os.getpid():
            path.unlink()
    except (OSError, ValueError):
        pass
