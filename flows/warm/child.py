"""The forked child of the warm process: becomes the client's run, then exits.

It takes the client's stdin/stdout/stderr, environment, working directory and argv, resets
what the warm process changed (signal handlers, the process group), rebuilds what was decided
from the warm process's own streams (line buffering, Prefect's console log handler), then runs
exactly ``flows.cli.main`` and exits as a cold process would (threads joined, atexit handlers,
streams flushed). It never returns into the warm process's loop.
"""

from __future__ import annotations

import atexit
import contextlib
import os
import signal
import sys
import threading
import time
import traceback

from flows.warm import protocol
from flows.warm.protocol import RELAYED


def serve(conn, fds: list[int], request: dict, close: list[int]) -> None:
    """In the child: run the request and ``os._exit`` with its code."""
    code = 1
    try:
        become(fds, request, close)
        code = run()
        finish()
    except BaseException:  # noqa: BLE001 - a child must never return into the warm loop
        traceback.print_exc()
    finally:
        _flush()
        protocol.send_line(conn, "exit", code)
        os._exit(code)


def become(fds: list[int], request: dict, close: list[int]) -> None:
    os.setpgid(0, 0)  # the client relays signals to this group, as a terminal signals a cold one
    signal.set_wakeup_fd(-1)
    for signum in (signal.SIGCHLD, *RELAYED):
        signal.signal(signum, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.pthread_sigmask(signal.SIG_UNBLOCK, RELAYED)  # blocked by the warm process across the fork
    for fd in close:
        _close(fd)
    for target, fd in enumerate(fds):
        os.dup2(fd, target)
        _close(fd)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    time.tzset()
    sys.argv = list(request["argv"])
    _streams()


def _streams() -> None:
    """Decide again what Python and Prefect decided from the warm process's streams."""
    for stream in (sys.stdout, sys.stdin):
        stream.reconfigure(line_buffering=stream.isatty())
    from prefect.logging.configuration import setup_logging

    setup_logging(incremental=False)  # its console handler re-reads the terminal and its colours


def run() -> int:
    from flows.cli import main

    try:
        main()
    except SystemExit as e:
        return _code(e.code)
    except KeyboardInterrupt:
        traceback.print_exc()
        return 128 + signal.SIGINT
    return 0


def _code(value) -> int:
    if value is None:
        return 0
    if isinstance(value, int):
        return value
    print(value, file=sys.stderr)
    return 1


def finish() -> None:
    """What the interpreter does at exit: join non-daemon threads, run atexit handlers."""
    shutdown = getattr(threading, "_shutdown", None)
    if shutdown is not None:
        shutdown()
    atexit._run_exitfuncs()


def _flush() -> None:
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(OSError, ValueError):
            stream.flush()


def _close(fd: int) -> None:
    with contextlib.suppress(OSError):
        os.close(fd)
