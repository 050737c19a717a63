"""GigatokenBackend: the fast encode path, id-for-id equal to TokenizersBackend where verified.

Special-token strings in user text. gigatoken always splits every added token out of the text,
so ``"<|endoftext|>"`` in a document would become the single special id; `tokenizers` with
``encode_special_tokens = True`` skips the *special* added tokens when matching and encodes
their strings as ordinary text. We make the two agree by loading gigatoken from a copy of
tokenizer.json whose ``added_tokens`` list holds only the non-special entries
(tokenizer_derived.py makes it, once per tokenizer.json and machine): gigatoken then
has nothing to split a special string on, and its pre-tokenizer and BPE treat it as text,
exactly as `tokenizers` does. This keeps every text on the fast path (no per-text scan, no
second encoder); no other token or id changes, since the model vocabulary is left as it is. The probe
set (probe.py) encodes each special string alone, glued to words and repeated to check this
on each tokenizer at load time.

Memory. gigatoken keeps a pretoken -> ids cache per worker that grows (it doubles, never
evicts) with every distinct pretoken it sees, for as long as the tokenizer lives: over a long
run of varied text RSS grows without bound (see bench/backend_memory.py for the numbers). The
cache cannot be cleared through gigatoken's API, so this backend rebuilds its gigatoken
tokenizer once both (a) it has encoded ``reset_every_chars`` characters of input with it and
(b) the process's resident memory has grown by ``cache_budget_bytes`` since it was loaded. (a)
keeps rebuilds rare (each one loses the warm cache); (b) skips the rebuilds text does not need:
on text whose words repeat the cache stops growing, and a rebuild would only cost time. On text
full of new words the cache grows by more than the budget every interval, and the backend
rebuilds after every interval, as it did before the budget. Between dropping the old
tokenizer and loading the new one it calls ``malloc_trim``: glibc would otherwise keep the old
cache's pages, and the peak would still creep up with the chunk. Where the resident size cannot
be read (no ``/proc``), (b) counts as met.

Threads. Whether a batch is spread over gigatoken's thread pool or encoded on the calling thread
is decided per call by encode_pool.py: the calling thread for the pt stage's encode thread on 2
cores (the stage's reading, hashing and writing threads need the other core), else the pool.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.formats.ragged import Ragged, offsets_from_lengths
from pipeline_core.memory.heap import release_free_memory, resident_bytes
from pipeline_core.tokenizer.derived import gigatoken_json
from pipeline_core.tokenizer.encode_pool import encode_parallel
from pipeline_core.tokenizer.probe import Mismatch

# Rebuild gigatoken after this much input. Measured with GPT-2 on 2 cores (bench/backend_memory.py):
# text full of new words grows RSS ~2.8 MB per MB encoded without a bound (1.8 GB after 600 MB).
# On the benchmark's memory corpora (pt, pack 2048; peak RSS 100 MB chunk -> 1 GB chunk, 3 runs
# each, with the trim after each rebuild): every 200 M characters 255-264 -> 305 MiB (+16-20%),
# every 100 M 254 -> 277 MiB (+9%), every 80 M 263 -> 268 MiB (+2%). A rebuild costs ~0.3 s of
# loading plus re-warming the cache; the 1 GB chunk took 27.0-27.6 s against 24.5-25.4 s.
DEFAULT_RESET_EVERY_CHARS = 80_000_000
# Another interval, in characters (0: never rebuild), where speed on huge chunks matters more.
RESET_ENV = "H5PIPE_GIGATOKEN_RESET_CHARS"
# ... and only once the process has grown by this much since the tokenizer was loaded. The growth
# counts the stage's own batches in flight too: on the bench's 400 MB pt corpus the process grew
# 161 -> 308 MiB within the first interval, and the rebuild that 128 MiB called for freed only
# ~40 MiB. With 256, that job rebuilds 0-1 times instead of 2-4 at an equal peak (1 GB chunk:
# +2%; text full of new words: +3%, rebuilt as often as with 128; docs/performance.md).
DEFAULT_CACHE_BUDGET_MB = 256
# A batch of fewer characters is encoded to Python lists (``encode_batch_list``) and made into a
# Ragged here: building gigatoken's awkward array costs ~0.5-1 ms a call whatever its size, more
# than a few thousand tokens take as lists (GPT-2, 2 cores: 4 KB 0.26 against 1.06 ms a batch,
# 16 KB 0.68 against 0.51 ms). It matters where every chunk is a small file.
SMALL_BATCH_CHARS = 8_192
CACHE_BUDGET_ENV = "H5PIPE_GIGATOKEN_CACHE_MB"
_FROM_ENV = object()


_USE_TOKENIZERS = "use backend='tokenizers', or backend='auto' to fall back to it automatically"


class GigatokenUnavailable(ConfigError):
    """gigatoken cannot serve this tokenizer; ``reason`` says why, the message adds the fix."""

    def __init__(self, reason: str, fix: str = _USE_TOKENIZERS) -> None:
        super().__init__(f"{reason}; {fix}")
        self.reason = reason


class GigatokenMismatch(GigatokenUnavailable):
    """gigatoken loads this tokenizer but encodes a probe text differently from `tokenizers`."""

    def __init__(self, mismatch: Mismatch) -> None:
        super().__init__(f"gigatoken does not reproduce the tokenizers backend on {mismatch.describe()}")
        self.mismatch = mismatch


class GigatokenBackend:
    """Encode with gigatoken; special-token strings are encoded as text (see module docstring).

    ``verified`` is set by ``create_backend`` once the probe set matched `tokenizers`.
    ``resets`` counts cache-bounding rebuilds so far.
    """

    name = "gigatoken"

    def __init__(
        self,
        tokenizer_json: str,
        reset_every_chars: int | None = _FROM_ENV,
        lazy: bool = False,
        cache_budget_bytes: int | None = _FROM_ENV,
        resident: Callable[[], int | None] = resident_bytes,
    ) -> None:
        """``reset_every_chars``: None never rebuilds; by default H5PIPE_GIGATOKEN_RESET_CHARS or
        DEFAULT_RESET_EVERY_CHARS. ``cache_budget_bytes``: the growth that, past that interval,
        calls for a rebuild (0: any; by default H5PIPE_GIGATOKEN_CACHE_MB or
        DEFAULT_CACHE_BUDGET_MB); ``resident`` reads the process's resident bytes. ``lazy``: parse
        with gigatoken at the first encode, not now (for a tokenizer gigatoken is known to load: a
        process that never encodes, such as a fully cached rerun, skips the parse)."""
        if reset_every_chars is _FROM_ENV:
            reset_every_chars = reset_interval_from_env()
        if reset_every_chars is not None and reset_every_chars <= 0:
            raise ConfigError(f"reset_every_chars must be positive or None (never reset), got {reset_every_chars}")
        if cache_budget_bytes is _FROM_ENV:
            cache_budget_bytes = cache_budget_from_env()
        if cache_budget_bytes is None or cache_budget_bytes < 0:
            raise ConfigError(f"cache_budget_bytes must be 0 or more, got {cache_budget_bytes}")
        encode_parallel()  # refuses a bad H5PIPE_GIGATOKEN_PARALLEL now, not at the first encode
        self._json = gigatoken_json(tokenizer_json)
        self._reset_every = reset_every_chars
        self._budget, self._resident = cache_budget_bytes, resident
        self._tok = None
        self._idle = threading.Condition()  # guards the fields below; notified when a call ends
        self._running = 0  # encode calls in progress
        self._chars_since_reset = 0
        self._resident_at_load: int | None = None
        if not lazy:
            self._load()
        self.resets = 0
        self.verified = False

    def encode_batch(self, texts: list[str]) -> Ragged:
        # Calls may overlap (the cache stage encodes two batches at once, tasks in threads share a
        # backend): gigatoken's tokenizer serves concurrent calls, and two of them keep the cores
        # busier than one (measured: stages/encode_ahead.py). A rebuild waits for the running
        # calls to end, so the old cache is freed whole before the new tokenizer allocates.
        with self._idle:
            self._bound_cache()
            if self._tok is None:
                self._load()
            tok, self._running = self._tok, self._running + 1
            chars = sum(map(len, texts))
            self._chars_since_reset += chars
        parallel = encode_parallel()
        try:
            if chars < SMALL_BATCH_CHARS:
                return Ragged.from_id_lists(tok.encode_batch_list(texts, parallel=parallel))
            rows = tok.encode_batch(texts, parallel=parallel)
        finally:
            with self._idle:
                self._running -= 1
                self._idle.notify_all()
        return ragged_from_awkward(rows)

    def __getstate__(self) -> dict:
        # The gigatoken tokenizer is a Rust object that cannot be pickled (dask, spawn, Prefect
        # input hashing pickle the AutoTokenizer holding this backend): rebuild it from the JSON.
        return {
            **self.__dict__,
            **{"_tok": None, "_idle": None, "_running": 0, "_chars_since_reset": 0, "_resident_at_load": None},
        }

    def __setstate__(self, state: dict) -> None:
        self.__dict__.update(state)  # gigatoken loads at the first encode, as for a lazy backend
        self._idle = threading.Condition()

    def _load(self) -> None:
        self._tok = load_gigatoken(self._json)
        self._resident_at_load = self._resident()

    def _cache_grew(self) -> bool:
        """True once the process has grown by the budget since the tokenizer was loaded, or when
        either size is unknown."""
        now, then = self._resident(), self._resident_at_load
        return now is None or then is None or now - then >= self._budget

    def _bound_cache(self) -> None:
        """Drop the tokenizer after ``reset_every_chars`` of input once the process has grown by the
        budget, and once no call uses it; the caller loads a new one. Called holding ``_idle``."""
        if self._reset_every is None or self._chars_since_reset < self._reset_every or not self._cache_grew():
            return
        self._idle.wait_for(lambda: self._running == 0)
        if self._chars_since_reset < self._reset_every:  # another call rebuilt it while this one waited
            return
        self._tok = None  # freed before the next load allocates new caches
        release_free_memory()  # ... and its pages handed back, which glibc would otherwise keep
        self._chars_since_reset = 0
        self.resets += 1


def reset_interval_from_env() -> int | None:
    """H5PIPE_GIGATOKEN_RESET_CHARS as a rebuild interval (0: None, never), else the default."""
    raw = os.environ.get(RESET_ENV, "").strip()
    if not raw:
        return DEFAULT_RESET_EVERY_CHARS
    try:
        chars = float(raw)
        whole = int(chars)
    except (ValueError, OverflowError):  # not a number, nan, inf
        chars, whole = -1.0, -1
    if whole < 0 or chars != whole:
        raise ConfigError(
            f"{RESET_ENV}={raw!r} is not a number of characters: set it to e.g. 200000000 (or 2e8), "
            "or 0 to never rebuild gigatoken's cache"
        )
    return int(chars) or None


def cache_budget_from_env() -> int:
    """H5PIPE_GIGATOKEN_CACHE_MB in bytes (0: rebuild after every interval), else the default."""
    raw = os.environ.get(CACHE_BUDGET_ENV, "").strip()
    try:
        megabytes = float(raw) if raw else float(DEFAULT_CACHE_BUDGET_MB)
    except ValueError:
        megabytes = -1.0
    if not 0 <= megabytes < float("inf"):  # also refuses nan
        raise ConfigError(
            f"{CACHE_BUDGET_ENV}={raw!r} is not a size in MiB: set it to e.g. 256, "
            "or 0 to rebuild gigatoken after every interval whatever the memory"
        )
    return int(megabytes * (1 << 20))


def load_gigatoken(tokenizer_json: str):
    """A ``gigatoken.Tokenizer``, or GigatokenUnavailable saying why and what to use instead."""
    try:
        import gigatoken
    except ImportError as err:
        raise GigatokenUnavailable(
            "the gigatoken backend needs the gigatoken package", "pip install gigatoken, or use backend='tokenizers'"
        ) from err
    try:
        return gigatoken.Tokenizer.from_json(tokenizer_json)
    except Exception as err:  # gigatoken raises RuntimeError/ValueError/... for unsupported parts
        reason = str(err).strip().splitlines()[0] if str(err).strip() else type(err).__name__
        raise GigatokenUnavailable(f"gigatoken cannot load this tokenizer.json ({reason})") from err


def ragged_from_awkward(rows) -> Ragged:
    """gigatoken's awkward rows as a Ragged, sharing its buffers (no per-token Python work)."""
    layout = rows.layout
    if type(layout).__name__ != "ListOffsetArray" or type(layout.content).__name__ != "NumpyArray":
        return _ragged_from_any_awkward(rows)
    offsets = np.asarray(layout.offsets.data, dtype=np.int64)
    values = np.asarray(layout.content.data)[offsets[0] : offsets[-1]]
    if offsets[0]:
        offsets = offsets - offsets[0]
    return Ragged(_as_int32(values), offsets)


def _ragged_from_any_awkward(rows) -> Ragged:
    """Any other 2-level layout (reordered, empty...): still vectorised, but copies."""
    import awkward as ak

    lengths = ak.to_numpy(ak.num(rows, axis=1)).astype(np.int64)
    values = ak.to_numpy(ak.flatten(rows, axis=1))
    return Ragged(_as_int32(values), offsets_from_lengths(lengths))


def _as_int32(values: np.ndarray) -> np.ndarray:
    if values.dtype == np.uint32:
        return values.view(np.int32)  # ids are < vocab size < 2**31: same bits, no copy
    return values.astype(np.int32)
