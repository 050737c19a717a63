"""The client side: hand this run to the warm process of its fingerprint, or say it cannot.

``run_warm`` returns the run's exit code, or None when no warm process took the run (none
running, refused, dead, or silent past the handshake timeout): the caller then runs cold. Once
the warm process has forked the run's child, the client only relays signals and waits for the
exit status, so Ctrl-C and ``kill`` reach the run as they would a cold process.
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
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def run_warm(argv: list[str], fingerprint: str) -> int | None:
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
        return _wait(first[1], lines)


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
    """Relay signals to the run's process group until its status arrives; the exit code to use."""
    for signum in RELAYED:
        signal.signal(signum, lambda n, _frame: _relay(pid, n))
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
