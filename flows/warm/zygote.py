"""The warm process: imports everything a run needs, then forks one child per run.

Started in the background by a cold run (or ``h5pipe server start``) as
``python -c <bootstrap> SYS_PATH_JSON FINGERPRINT``, in the client's environment and cwd, own
session, output to ``warm.log``. It:

1. holds ``warm-<fp>.lock`` for its life (a second one for the same fingerprint exits at once);
2. imports Prefect, the flows and pipeline_core (with numpy's BLAS pool held to one thread, so
   that no thread exists to be lost in a fork; h5pipe does no BLAS work);
3. refuses to serve (exits; runs stay cold) if the process has more than one thread, or where
   the system cannot tell (no ``/proc/self/task``: a fork could lose a thread nobody can see);
4. serves (flows/warm/loop.py): binds ``warm-<fp>.sock`` (0600, in the 0700 state dir, same-uid peers only) and writes its
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
import sys

from flows.warm import state
from flows.warm.loop import Warm, log

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
    from pipeline_core.tokenizer.encode_pool import thread_count  # preloaded: no import cost here

    threads = thread_count()
    if threads is None:
        log(
            "not serving: this system does not list a process's threads (/proc/self/task), so a fork "
            "cannot be shown to lose none; runs stay cold (H5PIPE_WARM=off skips this attempt)"
        )
        return
    if threads != 1:
        log(f"not serving: {threads} threads after the imports (a fork would lose them)")
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
