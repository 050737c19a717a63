"""gigatoken's cache rebuilds: ids unchanged, memory handed back, safe under threads, interval and
memory budget set."""

from __future__ import annotations

import threading
from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer.backends import TokenizersBackend
from pipeline_core.tokenizer.gigatoken import GigatokenBackend
from tests.pipeline_core.tokenizer.backend_corpora import GPT2, assert_same, corpus_strings, require_fixtures


def test_cache_resets_keep_ids(tokenizer_json):
    texts = corpus_strings("c4_demo.jsonl")
    bounded = GigatokenBackend(tokenizer_json, reset_every_chars=150_000, cache_budget_bytes=0)
    unbounded = GigatokenBackend(tokenizer_json, reset_every_chars=None)
    for start in range(0, len(texts), 100):
        assert_same(
            bounded.encode_batch(texts[start : start + 100]), unbounded.encode_batch(texts[start : start + 100])
        )
    assert bounded.resets >= 2 and unbounded.resets == 0


def test_each_rebuild_hands_the_old_cache_back_before_the_next_load(tokenizer_json, monkeypatch):
    import pipeline_core.tokenizer.gigatoken as module

    order = []
    real_load = module.load_gigatoken
    monkeypatch.setattr(module, "release_free_memory", lambda: order.append("trim"))
    monkeypatch.setattr(module, "load_gigatoken", lambda text: order.append("load") or real_load(text))
    backend = GigatokenBackend(tokenizer_json, reset_every_chars=150_000, cache_budget_bytes=0)
    texts = corpus_strings("c4_demo.jsonl")
    for start in range(0, len(texts), 100):
        backend.encode_batch(texts[start : start + 100])
    assert backend.resets >= 2
    assert order == ["load"] + ["trim", "load"] * backend.resets


def test_threads_sharing_a_backend_never_meet_a_rebuild(trained_dir):
    """Tasks in threads share one backend: a rebuild must not swap the tokenizer under a running call."""
    tokenizer_json = (trained_dir / "tokenizer.json").read_text(encoding="utf-8")
    texts = corpus_strings("c4_demo.jsonl")[:40]
    expected = TokenizersBackend(tokenizer_json).encode_batch(texts)
    shared = GigatokenBackend(tokenizer_json, reset_every_chars=1, cache_budget_bytes=0)  # rebuilt before each call

    def encode(_: int) -> Ragged:
        return shared.encode_batch(texts)

    with ThreadPoolExecutor(4) as pool:
        for got in pool.map(encode, range(60)):
            assert_same(got, expected)
    assert shared.resets == 59


@pytest.mark.parametrize(("value", "interval"), [("", 80_000_000), ("2e8", 200_000_000), ("1000", 1000), ("0", None)])
def test_reset_interval_comes_from_the_environment(tokenizer_json, monkeypatch, value, interval):
    from pipeline_core.tokenizer.gigatoken import DEFAULT_RESET_EVERY_CHARS, RESET_ENV

    assert DEFAULT_RESET_EVERY_CHARS == 80_000_000
    monkeypatch.setenv(RESET_ENV, value)
    backend = GigatokenBackend(tokenizer_json, lazy=True)
    assert backend._reset_every == interval
    assert GigatokenBackend(tokenizer_json, reset_every_chars=5, lazy=True)._reset_every == 5  # an argument wins


@pytest.mark.parametrize("value", ["lots", "-5", "1.5", "inf", "nan"])
def test_a_bad_reset_interval_in_the_environment_names_the_variable(tokenizer_json, monkeypatch, value):
    from pipeline_core.tokenizer.gigatoken import RESET_ENV

    monkeypatch.setenv(RESET_ENV, value)
    with pytest.raises(ValueError, match=f"{RESET_ENV}=.*0 to never rebuild"):
        GigatokenBackend(tokenizer_json, lazy=True)


def test_reset_interval_must_be_positive():
    require_fixtures()
    with pytest.raises(ValueError, match="reset_every_chars"):
        GigatokenBackend(GPT2.read_text(encoding="utf-8"), reset_every_chars=0)


class Watched:
    """A real gigatoken tokenizer that records how many of its encode calls overlap."""

    def __init__(self, tok, calls: dict, hold: threading.Barrier | None = None) -> None:
        self.tok, self.calls, self.hold = tok, calls, hold

    def encode_batch(self, texts, parallel=None):
        with self.calls["lock"]:
            self.calls["running"] += 1
            self.calls["most"] = max(self.calls["most"], self.calls["running"])
        try:
            if self.hold is not None:
                self.hold.wait(timeout=10)  # both calls inside gigatoken at once, or the barrier breaks
            return self.tok.encode_batch(texts, parallel=parallel)
        finally:
            with self.calls["lock"]:
                self.calls["running"] -= 1


def watch_loads(monkeypatch, hold=None) -> dict:
    import pipeline_core.tokenizer.gigatoken as module

    calls = {"lock": threading.Lock(), "running": 0, "most": 0, "trims_while_running": 0}
    real_load, real_trim = module.load_gigatoken, module.release_free_memory

    def trim():
        calls["trims_while_running"] += calls["running"] > 0
        real_trim()

    monkeypatch.setattr(module, "load_gigatoken", lambda text: Watched(real_load(text), calls, hold))
    monkeypatch.setattr(module, "release_free_memory", trim)
    return calls


def test_two_threads_encode_through_one_backend_at_once(tokenizer_json, monkeypatch):
    """Calls overlap (no lock around gigatoken), and each gets the ids `tokenizers` gives."""
    calls = watch_loads(monkeypatch, hold=threading.Barrier(2))
    texts = corpus_strings("c4_demo.jsonl")[:200]
    halves = [texts[:100], texts[100:]]
    shared = GigatokenBackend(tokenizer_json, reset_every_chars=None)
    with ThreadPoolExecutor(2) as pool:
        got = list(pool.map(shared.encode_batch, halves))
    assert calls["most"] == 2
    reference = TokenizersBackend(tokenizer_json)
    for half, ragged in zip(halves, got):
        assert_same(ragged, reference.encode_batch(half))


def test_a_rebuild_waits_for_the_calls_in_flight(tokenizer_json, monkeypatch):
    calls = watch_loads(monkeypatch)
    texts = corpus_strings("c4_demo.jsonl")
    batches = [texts[i : i + 25] for i in range(0, len(texts), 25)]
    shared = GigatokenBackend(tokenizer_json, reset_every_chars=100_000, cache_budget_bytes=0)
    with ThreadPoolExecutor(3) as pool:
        got = list(pool.map(shared.encode_batch, batches))
    assert shared.resets >= 2 and calls["trims_while_running"] == 0
    reference = TokenizersBackend(tokenizer_json)
    for batch, ragged in zip(batches, got):
        assert_same(ragged, reference.encode_batch(batch))


class Resident:
    """A stand-in for the process's resident size, set by the test."""

    def __init__(self, size: int | None = 1000) -> None:
        self.size = size

    def __call__(self) -> int | None:
        return self.size


def test_no_rebuild_while_the_process_has_not_grown_by_the_budget(tokenizer_json):
    """Past the interval, the tokenizer is kept (its cache warm) until memory has grown by the budget."""
    resident = Resident()
    backend = GigatokenBackend(tokenizer_json, reset_every_chars=1, cache_budget_bytes=500, resident=resident)
    texts = corpus_strings("c4_demo.jsonl")[:20]
    for grown in (0, 100, 499):
        resident.size = 1000 + grown
        backend.encode_batch(texts)
    assert backend.resets == 0
    resident.size = 1500  # grown by the budget: the next call rebuilds
    backend.encode_batch(texts)
    assert backend.resets == 1
    resident.size = 1900  # measured from the new load (at 1500): 400 more is under the budget
    backend.encode_batch(texts)
    assert backend.resets == 1
    resident.size = 2000
    backend.encode_batch(texts)
    assert backend.resets == 2


def test_the_budget_waits_for_the_interval(tokenizer_json):
    resident = Resident()
    backend = GigatokenBackend(tokenizer_json, reset_every_chars=10**9, cache_budget_bytes=1, resident=resident)
    resident.size = 10**12
    backend.encode_batch(corpus_strings("c4_demo.jsonl")[:20])
    assert backend.resets == 0


def test_an_unknown_resident_size_rebuilds_after_each_interval(tokenizer_json):
    """Without /proc the backend cannot see the cache grow: it bounds it by the interval alone."""
    backend = GigatokenBackend(tokenizer_json, reset_every_chars=1, cache_budget_bytes=10**12, resident=Resident(None))
    texts = corpus_strings("c4_demo.jsonl")[:20]
    for _ in range(3):
        backend.encode_batch(texts)
    assert backend.resets == 2


def test_the_real_resident_size_is_read_where_there_is_proc():
    import os

    from pipeline_core.memory.heap import resident_bytes

    if not os.path.exists("/proc/self/statm"):
        assert resident_bytes() is None
        return
    before = resident_bytes()
    block = b"\x01" * (64 << 20)  # written, so resident
    grown = resident_bytes() - before
    del block
    assert 60 << 20 <= grown <= 80 << 20


@pytest.mark.parametrize(("value", "budget"), [("", 256 << 20), ("128", 128 << 20), ("0.5", 1 << 19), ("0", 0)])
def test_cache_budget_comes_from_the_environment(tokenizer_json, monkeypatch, value, budget):
    from pipeline_core.tokenizer.gigatoken import CACHE_BUDGET_ENV, DEFAULT_CACHE_BUDGET_MB

    assert DEFAULT_CACHE_BUDGET_MB == 256
    monkeypatch.setenv(CACHE_BUDGET_ENV, value)
    assert GigatokenBackend(tokenizer_json, lazy=True)._budget == budget
    assert GigatokenBackend(tokenizer_json, lazy=True, cache_budget_bytes=7)._budget == 7  # an argument wins


@pytest.mark.parametrize("value", ["lots", "-1", "inf", "nan"])
def test_a_bad_cache_budget_in_the_environment_names_the_variable(tokenizer_json, monkeypatch, value):
    from pipeline_core.tokenizer.gigatoken import CACHE_BUDGET_ENV

    monkeypatch.setenv(CACHE_BUDGET_ENV, value)
    with pytest.raises(ValueError, match=f"{CACHE_BUDGET_ENV}=.*size in MiB"):
        GigatokenBackend(tokenizer_json, lazy=True)


def test_a_pickled_backend_measures_growth_from_its_own_load(tokenizer_json):
    import pickle

    backend = GigatokenBackend(tokenizer_json, reset_every_chars=1, cache_budget_bytes=500, resident=Resident(1000))
    copy = pickle.loads(pickle.dumps(backend))  # as a worker process gets it
    copy._resident.size = 10**6  # a bigger process: growth counts from the copy's load, not the original's
    copy.encode_batch(["first"])  # loads here
    copy.encode_batch(["second"])
    assert copy.resets == 0
