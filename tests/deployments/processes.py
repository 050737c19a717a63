"""Long-running subprocesses for the real-server tests: started in their own process group, logged
to a file, and stopped by pid (their own and every descendant's), even when a test failed.
"""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import psutil

PREFECT = [sys.executable, "-m", "prefect"]


def prefect_env(home: Path, api_url: str | None = None, **extra: str) -> dict[str, str]:
    """This environment without any PREFECT_* of the caller's, plus a private PREFECT_HOME."""
    env = {k: v for k, v in os.environ.items() if not k.startswith("PREFECT_")}
    env.update(
        PREFECT_HOME=str(home),
        PREFECT_SERVER_ANALYTICS_ENABLED="false",
        PREFECT_TELEMETRY_ENABLE_RESOURCE_METRICS="false",
        DO_NOT_TRACK="1",
        TOKENIZERS_PARALLELISM="false",
    )
    if api_url:
        env["PREFECT_API_URL"] = api_url
    env.update(extra)
    return env


@dataclass
class Service:
    name: str
    process: subprocess.Popen
    log: Path

    def tail(self, lines: int = 60) -> str:
        text = self.log.read_text(encoding="utf-8", errors="replace") if self.log.exists() else ""
        return f"--- last lines of {self.log} ---\n" + "\n".join(text.splitlines()[-lines:])

    def check_alive(self) -> None:
        if self.process.poll() is not None:
            raise RuntimeError(f"{self.name} exited with code {self.process.returncode}\n{self.tail()}")

    def stop(self, grace: float = 20.0) -> None:
        """SIGINT the group, then SIGKILL whatever of it (and of its descendants) is left."""
        family = _family(self.process.pid)
        _signal_group(self.process.pid, signal.SIGINT)
        try:
            self.process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            _signal_group(self.process.pid, signal.SIGKILL)
            self.process.wait(timeout=grace)
        _, alive = psutil.wait_procs(family, timeout=grace / 4)
        for proc in alive:  # descendants in sessions of their own (Prefect isolates flow runs)
            proc.kill()
        psutil.wait_procs(alive, timeout=grace / 4)


def start(name: str, args: list[str], env: dict[str, str], log_dir: Path, cwd: Path | None = None) -> Service:
    log = log_dir / f"{name}.log"
    with open(log, "wb") as out:
        process = subprocess.Popen(
            args,
            env=env,
            cwd=cwd,
            stdout=out,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            start_new_session=True,
        )
    return Service(name, process, log)


def run(args: list[str], env: dict[str, str], cwd: Path | None = None, timeout: float = 300) -> str:
    """Run a short command; fail with its output when it fails."""
    done = subprocess.run(args, env=env, cwd=cwd, capture_output=True, text=True, timeout=timeout)
    output = done.stdout + done.stderr
    if done.returncode != 0:
        raise RuntimeError(f"{' '.join(args)} failed with code {done.returncode}:\n{output}")
    return output


def wait_for(condition: Callable[[], bool], timeout: float, what: str, service: Service | None = None) -> None:
    """Poll ``condition`` until true; fail early if ``service`` died, with its log either way."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if service:
            service.check_alive()
        if condition():
            return
        time.sleep(1.0)
    raise TimeoutError(f"{what} not reached within {timeout:.0f} s\n{service.tail() if service else ''}")


def _family(pid: int) -> list[psutil.Process]:
    try:
        parent = psutil.Process(pid)
        return [parent, *parent.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


def _signal_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError):
        os.killpg(pid, sig)
