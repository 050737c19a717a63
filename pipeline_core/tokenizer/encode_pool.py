"""Whether gigatoken encodes a batch on its thread pool or on the calling thread.

gigatoken's batch calls take ``parallel=``: True spreads a batch over a process-wide rayon pool of
one thread per core, False encodes it on the calling thread, None (its default) means True except
in a multiprocessing worker or a forked child. The ids are the same either way.

h5pipe decides it per call (``encode_parallel``):

- **The cache stage's encode threads, on 2 cores or fewer: the calling thread.** The pt stream
  encodes in a thread of its own (stages/encode_ahead.py, which marks it with ``beside_the_stage``)
  while other threads read and parse the next batch, hash the input and write HDF5; on 2 cores
  gigatoken's pool only competes with them. Measured on the bench's 400 MB pt corpus (GPT-2, Intel
  Xeon, 3 fresh processes each, alternated with the pool): the library stage took 2.45-2.62 s
  against 2.60-2.88 s unpacked and 2.83-2.96 s against 3.24-3.37 s packed 2048, peak RSS ~40 MiB
  lower (one pretoken cache instead of one per pool thread). Where nothing else works beside the
  encoder the pool is faster: sft and chat-template rows, which encode in the stage's main thread,
  took ~8% longer on the calling thread, and gigatoken alone (bench/backend_memory.py) 1.4x.
- **Everywhere else: the pool**, where it is safe: not in a multiprocessing worker (each worker's
  pool would have every core: gigatoken's own rule), and in a forked child only if the process it
  was forked from had one thread, so no pool existed to be lost in the fork (a parallel call
  would then wait forever). That is the case of the warm h5pipe process (flows/warm), which
  refuses to fork when it has more than one thread; gigatoken's own rule would encode every run
  it serves on one thread.
- ``H5PIPE_GIGATOKEN_PARALLEL``: ``1`` for the pool everywhere (where safe, as above), ``0`` for the
  calling thread everywhere, empty or ``auto`` for the rule above.
"""

from __future__ import annotations

import multiprocessing
import os
import threading

from pipeline_core.errors import ConfigError

PARALLEL_ENV = "H5PIPE_GIGATOKEN_PARALLEL"
POOL_MIN_CORES = 3  # on fewer, the stage's own threads need the cores gigatoken's pool would take

_ON, _OFF = ("1", "on", "true", "yes"), ("0", "off", "false", "no")

_thread = threading.local()
_threads_before_fork: int | None = None
_forked = False
_forked_from_one_thread = False


def encode_parallel() -> bool | None:
    """The ``parallel=`` for gigatoken's batch calls in this process, now (see the module docstring)."""
    if not _wants_pool():
        return False
    if multiprocessing.parent_process() is not None:
        return None  # gigatoken's rule: the calling thread in a worker process
    if _forked:
        return True if _forked_from_one_thread else None
    return None  # gigatoken's default: the pool


def beside_the_stage() -> None:
    """Mark the calling thread as one that encodes while the cache stage's other threads read, hash
    and write (a ThreadPoolExecutor ``initializer``)."""
    _thread.beside_the_stage = True


def _wants_pool() -> bool:
    raw = os.environ.get(PARALLEL_ENV, "").strip().lower()
    if raw in ("", "auto"):
        return not getattr(_thread, "beside_the_stage", False) or usable_cores() >= POOL_MIN_CORES
    if raw in _ON:
        return True
    if raw in _OFF:
        return False
    raise ConfigError(
        f"{PARALLEL_ENV}={raw!r} is not understood: set it to 1 (gigatoken's thread pool), 0 (the calling "
        "thread) or auto (the calling thread for the cache stage's encode threads on 2 cores or fewer)"
    )


def usable_cores() -> int:
    """Cores this process may run on (its CPU affinity where the system tells it)."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def thread_count() -> int | None:
    """Threads of this process, native ones included (``/proc/self/task``); None where the system
    does not list them (not Linux). Callers that need one thread before a fork take None as "not
    proven": a forked child then keeps gigatoken's rule, the warm process does not serve."""
    try:
        return len(os.listdir("/proc/self/task"))
    except OSError:
        return None


def _before_fork() -> None:
    global _threads_before_fork
    _threads_before_fork = thread_count()


def _after_fork_in_child() -> None:
    global _forked, _forked_from_one_thread
    _forked_from_one_thread = (not _forked or _forked_from_one_thread) and _threads_before_fork == 1
    _forked = True


if hasattr(os, "register_at_fork"):
    os.register_at_fork(before=_before_fork, after_in_child=_after_fork_in_child)
