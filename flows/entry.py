"""The ``h5pipe`` console entry: a run command goes to the warm process when one serves its
fingerprint (flows/warm/), else runs cold here and leaves a warm process for next time.

It imports only small standard modules before deciding, so a warm run costs the interpreter's
start plus tens of milliseconds; every other command (``server``, ``--help``, ``sample``,
``serve``) and every run with ``H5PIPE_WARM=off`` (or ``H5PIPE_SERVER=temporary``) is cold:
exactly ``flows.cli.main``.
"""

from __future__ import annotations

import os
import sys

WARM_COMMANDS = ("cache", "export", "run", "verify", "inspect", "merge")
HELP = ("--help", "-h", "--version")


def main() -> None:
    argv = list(sys.argv)
    warm = _warm_fingerprint(argv)
    environ = dict(os.environ)  # the warm process gets this, not what the cold run sets in its own
    if warm is not None and _goes_warm(argv):
        from flows.warm.client import run_warm

        code = run_warm(argv, warm)
        if code is not None:
            sys.exit(code)
    try:
        from flows.cli import main as cold

        cold()
    finally:
        if warm is not None and _leaves_warm(argv):
            from flows.warm.zygote import spawn

            spawn(warm, environ)


def _warm_fingerprint(argv: list[str]) -> str | None:
    """The fingerprint when this command may use or leave a warm process, else None."""
    if not (_goes_warm(argv) or _leaves_warm(argv)):
        return None
    from flows.warm import state

    try:
        if not state.enabled():
            return None
    except ValueError as e:
        print(f"h5pipe: {e}", file=sys.stderr)
        sys.exit(2)
    from flows.warm.fingerprint import fingerprint

    return fingerprint()


def _goes_warm(argv: list[str]) -> bool:
    return len(argv) > 1 and argv[1] in WARM_COMMANDS and not any(a in HELP for a in argv[2:])


def _leaves_warm(argv: list[str]) -> bool:
    return _goes_warm(argv) or argv[1:3] == ["server", "start"]
