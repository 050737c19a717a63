"""The client side: hand this run to the warm process of its fingerprint, or say it cannot.

``run_warm`` returns the run's exit code, or None when no warm process took the run (none
running, refused, dead, or silent past the handshake timeout): the caller then runs cold. Once
the warm process has forked the run's child, the client only relays signals and waits for the
exit status, so Ctrl-C and ``kill`` reach the run as they would a cold process, and Ctrl-Z
(SIGTSTP) stops the run with the client, ``fg`` (SIGCONT) resuming both.
"""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import sys

from flows.warm import protocol, state

CONNECT_TIMEOUT = 1.0
HANDSHAKE_TIMEOUT = 10.0  # the fork takes milliseconds; a busy machine gets room
RELAYED = protocol.RELAYED
# Job control: the run's group has its parent in another session (the warm process's), so the
# kernel discards a SIGTSTP sent to it; it is stopped with SIGSTOP instead.
SUSPEND, RESUME = signal.SIGTSTP, signal.SIGCONT


def run_warm(argv: list[str], fingerprint: str) -> int | None:
    """The run's exit code, or None (nothing served it: run cold). Signals that arrive before the
    run's pid is known are held and relayed then, or, with no warm run, raised here again."""
    relay = Relay()
    code = _served(argv, fingerprint, relay)
    if code is None:
        relay.restore()
    return code


def _served(argv: list[str], fingerprint: str, relay: Relay) -> int | None:
    sock = connect(fingerprint)
    if sock is None:
        return None
    with sock:
        try:
            sock.settimeout(HANDSHAKE_TIMEOUT)
            protocol.send_request(sock, {"argv": argv, "env": dict(os.environ), "cwd": os.getcwd()}, [0, 1, 2])
            lines = _lines(sock)
            first = next(lines, None)
        except OSError:
            return None
        if first is None or first[0] != "pid":
            return None
        sock.settimeout(None)
        relay.to(first[1])
        return _wait(first[1], lines)


class Relay:
    """Relays RELAYED signals to the run's process group once its pid is known; holds them before."""

    def __init__(self) -> None:
        self.pid: int | None = None
        self.pending: list[int] = []
        self.previous = {signum: signal.signal(signum, self._on_signal) for signum in RELAYED}
        self.previous[SUSPEND] = signal.signal(SUSPEND, self._on_suspend)
        self.previous[RESUME] = signal.signal(RESUME, self._on_resume)

    def _on_signal(self, signum: int, _frame) -> None:
        if self.pid is None:
            self.pending.append(signum)
        else:
            _relay(self.pid, signum)

    def _on_suspend(self, _signum: int, _frame) -> None:
        """Ctrl-Z: the run stops, then this process, as a cold run stops whole."""
        if self.pid is not None:
            _relay(self.pid, signal.SIGSTOP)
        os.kill(os.getpid(), signal.SIGSTOP)

    def _on_resume(self, _signum: int, _frame) -> None:
        if self.pid is not None:
            _relay(self.pid, signal.SIGCONT)

    def to(self, pid: int) -> None:
        self.pid = pid
        for signum in self.pending:
            _relay(pid, signum)

    def restore(self) -> None:
        """Back to the handlers from before, then the held signals, as a cold process gets them."""
        for signum, handler in self.previous.items():
            signal.signal(signum, handler)
        for signum in self.pending:
            signal.raise_signal(signum)


def connect(fingerprint: str) -> socket.socket | None:
    """A connected socket to the warm process, or None; a long path is reached from its folder
    (a Unix socket address holds at most ~107 bytes)."""
    path = state.socket_path(fingerprint)
    sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    sock.settimeout(CONNECT_TIMEOUT)
    try:
        if len(os.fsencode(path)) < 100:
            sock.connect(os.fspath(path))
        else:
            _connect_from(sock, path)
    except OSError:
        sock.close()
        return None
    return sock


def _connect_from(sock: socket.socket, path) -> None:
    here = os.open(".", os.O_RDONLY)
    try:
        os.chdir(path.parent)
        sock.connect(path.name)
    finally:
        os.fchdir(here)
        os.close(here)


def _lines(sock: socket.socket):
    """(kind, number) for each line the warm process sends, until it closes."""
    pending = b""
    while True:
        data = sock.recv(4096)
        if not data:
            return
        pending += data
        while b"\n" in pending:
            line, pending = pending.split(b"\n", 1)
            kind, _, value = line.decode().partition(" ")
            yield kind, int(value)


def _wait(pid: int, lines) -> int:
    """The exit code to use, once the run's status arrives (signals are relayed meanwhile)."""
    for kind, value in lines:
        if kind == "exit":
            return value
        if kind == "signal":
            print(f"h5pipe: the run (pid {pid}) was killed by signal {_name(value)}", file=sys.stderr)
            return 128 + value
    print(f"h5pipe: the warm process ended without the run's exit status (run pid {pid})", file=sys.stderr)
    return 1


def _relay(pid: int, signum: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, signum)


def _name(signum: int) -> str:
    try:
        return signal.Signals(signum).name
    except ValueError:
        return str(signum)
