"""The bytes between a client and a warm process, over one Unix stream socket per run.

client -> warm: ``MAGIC``, a 4-byte big-endian length and a JSON request ``{argv, env, cwd}``;
stdin, stdout and stderr ride along as file descriptors (SCM_RIGHTS) on the first bytes.
warm -> client: text lines: ``pid N`` once the run's child is forked, then one of ``exit N``
(the child's exit code) or ``signal N`` (the child was killed by signal N).
"""

from __future__ import annotations

import contextlib
import json
import signal
import socket

MAGIC = b"H5W1"
HEADER = len(MAGIC) + 4
MAX_REQUEST = 16 * 1024 * 1024
# The signals the client relays to its run, and the child takes back from the warm process.
RELAYED = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGQUIT, signal.SIGUSR1, signal.SIGUSR2)


def send_request(sock: socket.socket, request: dict, fds: list[int]) -> None:
    body = json.dumps(request).encode("utf-8", "surrogateescape")
    data = MAGIC + len(body).to_bytes(4, "big") + body
    sent = socket.send_fds(sock, [data], fds)
    sock.sendall(data[sent:])


def receive_request(sock: socket.socket) -> tuple[dict, list[int]]:
    """The request and its descriptors; ValueError when it is not one."""
    data, fds, _flags, _addr = socket.recv_fds(sock, 65536, 3)
    try:
        if data[: len(MAGIC)] != MAGIC or len(data) < HEADER:
            raise ValueError("not an h5pipe warm request")
        size = int.from_bytes(data[len(MAGIC) : HEADER], "big")
        if size > MAX_REQUEST:
            raise ValueError(f"request of {size} bytes")
        body = bytearray(data[HEADER:])
        while len(body) < size:
            more = sock.recv(size - len(body))
            if not more:
                raise ValueError("request cut short")
            body += more
        return json.loads(bytes(body).decode("utf-8", "surrogateescape")), fds
    except ValueError:
        for fd in fds:
            _close(fd)
        raise


def send_line(sock: socket.socket, kind: str, value: int) -> None:
    with contextlib.suppress(OSError):  # the client left; nothing to tell
        sock.sendall(f"{kind} {value}\n".encode())


def _close(fd: int) -> None:
    import os

    with contextlib.suppress(OSError):
        os.close(fd)
