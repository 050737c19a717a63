"""``h5pipe server stop|status`` for the warm processes of this cache dir."""

from __future__ import annotations

import contextlib
import os
import signal
import time

from flows.warm import state

STOP_SECONDS = 15.0


def _alive(pid: int) -> bool:
    from flows.server_record import pid_alive

    return pid_alive(pid)


def stop_all(timeout: float = STOP_SECONDS) -> list[dict]:
    """SIGTERM every warm process, SIGKILL what still runs at the deadline; the records stopped."""
    records = [r for r in (*state.read_records(), *state.read_starting()) if _alive(r["pid"])]
    for r in records:
        with contextlib.suppress(ProcessLookupError):
            os.kill(r["pid"], signal.SIGTERM)
    deadline = time.monotonic() + timeout
    while any(_alive(r["pid"]) for r in records) and time.monotonic() < deadline:
        time.sleep(0.05)
    for r in records:
        with contextlib.suppress(ProcessLookupError):
            if _alive(r["pid"]):
                os.kill(r["pid"], signal.SIGKILL)
        state.forget_starting(r["pid"])
    _forget_dead()
    return records


def _forget_dead() -> None:
    """Remove the files of warm processes that no longer run (killed ones leave theirs)."""
    for r in state.read_starting():
        if not _alive(r["pid"]):
            state.forget_starting(r["pid"])
    for r in state.read_records():
        if not _alive(r["pid"]):
            for path in (state.record_path(r["fingerprint"]), state.socket_path(r["fingerprint"])):
                with contextlib.suppress(OSError):
                    path.unlink()


def status_lines() -> list[str]:
    _forget_dead()
    now = time.time()
    lines = []
    for r in (*state.read_starting(), *state.read_records()):
        if r.get("starting"):
            lines.append(f"warm h5pipe process pid {r['pid']}, fingerprint {r['fingerprint']}: starting (importing)")
            continue
        lines.append(
            f"warm h5pipe process pid {r['pid']}, fingerprint {r['fingerprint']}: served {r['served']} run(s), "
            f"{r['running']} running; idle {(now - r['last_used']) / 60:.1f} of {r['idle_seconds'] / 60:g} minutes"
        )
    return lines or ["no warm h5pipe process is running"]
