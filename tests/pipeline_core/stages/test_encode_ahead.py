"""EncodeAhead, and the cache stage encoding through it: results in input order, calls overlapping,
errors at their place, no thread left behind."""

import json
import random
import threading
import time

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import ProcessorFactory, cache_jsonl, load_h5
from pipeline_core.errors import ConfigError
from pipeline_core.stages.cache import CacheOptions, cache_file
from pipeline_core.stages.encode_ahead import DEFAULT_WIDTH, WIDTH_ENV, EncodeAhead, encode_width
from tests.pipeline_core.stages.test_read_ahead import texts_with_bad_lines, write_lines


def encode_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name.startswith("h5pipe-encode")]


@settings(max_examples=30, deadline=None)
@given(st.lists(st.floats(min_value=0, max_value=0.002), max_size=40), st.integers(1, 4))
def test_results_come_in_input_order_whatever_each_call_takes(delays, width):
    def slow_square(item):
        i, delay = item
        time.sleep(delay)
        return i * i

    with EncodeAhead(slow_square, enumerate(delays), width) as done:
        assert [(item[0], result) for item, result in done] == [(i, i * i) for i in range(len(delays))]
    assert not encode_threads()


def test_width_calls_run_at_once():
    running, most, lock = [0], [0], threading.Lock()
    both_in = threading.Barrier(2)

    def call(i):
        with lock:
            running[0] += 1
            most[0] = max(most[0], running[0])
        both_in.wait(timeout=10)  # breaks (and the test fails) unless two calls are in at once
        with lock:
            running[0] -= 1
        return i

    with EncodeAhead(call, range(10), width=2) as done:
        assert [r for _, r in done] == list(range(10))
    assert most[0] == 2


def test_inline_runs_in_the_callers_thread_and_width_one_in_one_worker():
    where = lambda _: threading.current_thread().name  # noqa: E731
    with EncodeAhead(where, range(3), width=1, inline=True) as done:
        assert [r for _, r in done] == [threading.current_thread().name] * 3
    with EncodeAhead(where, range(5), width=1) as done:
        names = {r for _, r in done}
    assert len(names) == 1 and names.pop().startswith("h5pipe-encode")
    assert not encode_threads()


def test_the_next_batches_are_submitted_while_the_consumer_is_busy():
    """The feeder submits without waiting for the consumer: three calls end while it holds the first."""
    ended = threading.Semaphore(0)

    def call(i):
        ended.release()
        return i

    with EncodeAhead(call, range(10), width=1) as done:
        for i, (_, r) in enumerate(done):
            if i == 0:  # busy writing batch 0: batches 1 and 2 still get processed meanwhile
                assert all(ended.acquire(timeout=10) for _ in range(3))
            assert r == i


def test_an_error_comes_at_its_place_after_the_results_before_it():
    def call(i):
        if i == 3:
            raise ValueError("batch 3 is bad")
        time.sleep(random.random() / 1000)
        return i

    seen = []
    with pytest.raises(ValueError, match="batch 3 is bad"), EncodeAhead(call, range(20), width=2) as done:
        seen.extend(r for _, r in done)
    assert seen == [0, 1, 2]
    assert not encode_threads()


def test_leaving_early_cancels_what_did_not_start():
    started = []

    def call(i):
        started.append(i)
        return i

    with EncodeAhead(call, range(10_000), width=2) as done:
        for _, r in done:
            if r == 5:
                break
    assert not encode_threads()
    assert len(started) <= 6 + 2 + 1 + 1  # the ones consumed, those waiting, one in the feeder's hand, one running


def test_width_must_be_positive():
    with pytest.raises(ValueError, match="width must be at least 1"):
        EncodeAhead(str, [], 0)


class Overlaps:
    """A real pt processor that records how many of its batches are processed at once."""

    def __init__(self, inner):
        self.inner, self.running, self.most, self.lock = inner, 0, 0, threading.Lock()

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def process_batch(self, rows):
        with self.lock:
            self.running += 1
            self.most = max(self.most, self.running)
        try:
            time.sleep(0.01)  # long enough that the next batch's call starts before this one ends
            return self.inner.process_batch(rows)
        finally:
            with self.lock:
                self.running -= 1


def test_the_stage_encodes_two_batches_at_once_when_told_and_keeps_their_order(gpt2, tmp_path, monkeypatch):
    lines, good, bad = texts_with_bad_lines(n=120, bad=(7, 8, 20, 61, 119))
    path = write_lines(tmp_path / "mixed.jsonl", lines)
    processor = Overlaps(ProcessorFactory.create("pt", gpt2))
    monkeypatch.setenv(WIDTH_ENV, "2")
    [out] = cache_jsonl(path, tmp_path / "out", processor, batch_size=6)
    assert processor.most == 2 != DEFAULT_WIDTH
    loaded = load_h5(out)["sequence"]
    eos = gpt2.eos_token_id
    assert [loaded[i].tolist() for i in range(len(loaded))] == [gpt2.encode(t) + [eos] for t in good]
    errors = (tmp_path / "out" / "mixed.errors.jsonl").read_text().splitlines()
    assert [json.loads(e)["line"] for e in errors] == list(bad)


def test_packed_files_are_the_same_encoded_ahead_or_one_batch_at_a_time(gpt2, tmp_path, monkeypatch):
    lines, _, _ = texts_with_bad_lines(n=120, bad=(7, 61))
    path = write_lines(tmp_path / "mixed.jsonl", lines)
    pad = gpt2.eos_token_id
    monkeypatch.setenv(WIDTH_ENV, "2")
    [ahead] = cache_jsonl(
        path, tmp_path / "ahead", Overlaps(ProcessorFactory.create("pt", gpt2)), 64, pad, batch_size=6
    )
    monkeypatch.setenv(WIDTH_ENV, "1")
    one_at_a_time = Overlaps(ProcessorFactory.create("pt", gpt2))
    [one] = cache_jsonl(path, tmp_path / "one", one_at_a_time, 64, pad, batch_size=6)
    assert one_at_a_time.most == 1
    with h5py.File(ahead) as a, h5py.File(one) as b:
        assert sorted(a) == sorted(b) and "position_ids" in a
        for key in a:
            assert np.array_equal(a[key][()], b[key][()]), key
        assert {k: str(v) for k, v in a.attrs.items()} == {k: str(v) for k, v in b.attrs.items()}


@pytest.mark.parametrize(("value", "width"), [("", 1), ("1", 1), ("2", 2), ("3", 3)])
def test_width_comes_from_the_environment(monkeypatch, value, width):
    monkeypatch.setenv(WIDTH_ENV, value)
    assert encode_width() == width


def test_the_options_width_wins_over_the_environment(gpt2, tmp_path, monkeypatch):
    monkeypatch.setenv(WIDTH_ENV, "2")
    lines, good, _ = texts_with_bad_lines(n=60, bad=(3,))
    path = write_lines(tmp_path / "rows.jsonl", lines)
    processor = Overlaps(ProcessorFactory.create("pt", gpt2))
    stats = cache_file(str(path), str(tmp_path / "out"), processor, CacheOptions(batch_size=6, encode_width=1))
    assert processor.most == 1
    loaded = load_h5(stats.output_url)["sequence"]
    assert [loaded[i].tolist() for i in range(len(loaded))] == [gpt2.encode(t) + [gpt2.eos_token_id] for t in good]
    with pytest.raises(ConfigError, match="encode_width must be at least 1"):
        CacheOptions(encode_width=0)


@pytest.mark.parametrize("value", ["0", "-1", "two", "1.5"])
def test_a_bad_width_names_the_variable_and_the_fix(monkeypatch, value):
    monkeypatch.setenv(WIDTH_ENV, value)
    with pytest.raises(ValueError, match=f"{WIDTH_ENV}=.* to 1 \\(the default, one batch encoded at a time\\)"):
        encode_width()


def test_only_a_class_that_says_so_is_run_on_two_batches_at_once(gpt2):
    from pipeline_core.processors.pt import PretrainProcessor

    class Counting(PretrainProcessor):  # state between batches: must not inherit pt's yes
        seen = 0

    class Stateless(PretrainProcessor):
        concurrent_batches = True

    assert PretrainProcessor.concurrent_batches is True
    assert Counting.concurrent_batches is False and Stateless.concurrent_batches is True
    from pipeline_core import StrategyFactory

    chatml = StrategyFactory.create("chatml", gpt2, text_markers=True)
    assert ProcessorFactory.create("sft", gpt2, strategy=chatml).concurrent_batches is False
