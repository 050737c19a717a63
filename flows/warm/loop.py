"""The warm process's serving loop (started by flows/warm/zygote.py once its imports are done):
one listening Unix socket, a fork per request (flows/warm/child.py), each child's exit status
reported to its client, a child SIGTERMed when its client goes away, and the ending rules
(idle time, SIGTERM, SIGUSR1 retirement, a replaced socket) the zygote's docstring lists.
"""

from __future__ import annotations

import contextlib
import json
import os
import selectors
import signal
import socket
import struct
import time

from flows.warm import protocol, state
from flows.warm.protocol import RELAYED

POLL_SECONDS = 5.0
STOP_SECONDS = 10.0


def log(message: str) -> None:
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
        log(f"serving fingerprint {self.fingerprint} (idle stop after {self.idle_seconds / 60:g} min)")
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
        from pipeline_core.tokenizer.encode_pool import thread_count  # preloaded by the zygote

        state.write_record(self.fingerprint, {
            "pid": os.getpid(), "fingerprint": self.fingerprint, "served": self.served, "running": len(self.children), "children": sorted(self.children),
            "threads": thread_count(),
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
            log(f"refused a request: {e}")
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
            log("socket replaced or removed; exiting")
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
        log(f"stopped after serving {self.served} run(s)")


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
