"""gigatoken's cache rebuilds: ids unchanged, memory handed back, safe under threads, interval set."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import pytest

from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer.backends import TokenizersBackend
from pipeline_core.tokenizer.gigatoken import GigatokenBackend
from tests.pipeline_core.tokenizer.backend_corpora import GPT2, assert_same, corpus_strings, require_fixtures


def test_cache_resets_keep_ids(tokenizer_json):
    texts = corpus_strings("c4_demo.jsonl")
    bounded = GigatokenBackend(tokenizer_json, reset_every_chars=150_000)
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
    backend = GigatokenBackend(tokenizer_json, reset_every_chars=150_000)
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
    shared = GigatokenBackend(tokenizer_json, reset_every_chars=1)  # rebuilt before every call

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
