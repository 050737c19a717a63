"""ReadAhead, and the cache stage reading through it: same items and order, errors where they were."""

import json
import os
import threading

import pytest

from pipeline_core import BadRowError, ProcessorFactory, cache_jsonl, load_h5
from pipeline_core.stages.encode_ahead import DEFAULT_WIDTH
from pipeline_core.stages.read_ahead import ReadAhead


def ahead_threads() -> list[threading.Thread]:
    return [t for t in threading.enumerate() if t.name == "h5pipe-read-ahead"]


@pytest.mark.parametrize("depth", [1, 3])
def test_every_item_in_order(depth):
    with ReadAhead(iter(range(1000)), depth) as ahead:
        assert list(ahead) == list(range(1000))
    assert not ahead_threads()


def test_items_are_made_in_another_thread():
    def made_where():
        for _ in range(3):
            yield threading.current_thread().name

    with ReadAhead(made_where()) as ahead:
        assert list(ahead) == ["h5pipe-read-ahead"] * 3


def test_an_error_comes_after_the_items_before_it():
    def items():
        yield 1
        yield 2
        raise OSError("disk gone at item 3")

    seen = []
    with pytest.raises(OSError, match="disk gone at item 3") as err, ReadAhead(items()) as ahead:
        seen.extend(ahead)
    assert seen == [1, 2]
    assert any(frame.name == "items" for frame in err.traceback)  # the producer's own frame


def test_leaving_early_stops_the_thread_and_closes_the_iterator():
    made, closed = [], threading.Event()

    def items():
        try:
            for i in range(10_000):
                made.append(i)
                yield i
        finally:
            closed.set()

    with ReadAhead(items(), depth=2) as ahead:
        for item in ahead:
            if item == 5:
                break
    assert closed.is_set()
    assert not ahead_threads()
    assert len(made) <= 6 + 2 + 1  # bounded: the queue (2) and the item being made, no more


def test_depth_must_be_positive():
    with pytest.raises(ValueError, match="depth must be at least 1"):
        ReadAhead([], 0)


def write_lines(path, lines):
    path.write_bytes(b"".join(line + b"\n" for line in lines))
    return path


def texts_with_bad_lines(n=40, bad=(7, 8, 20)):
    """(file lines, the good texts in order, 1-based numbers of the bad lines)."""
    lines, good = [], []
    for i in range(1, n + 1):
        if i in bad:
            lines.append(b'{"text": "unfinished' if i % 2 else b"[1, 2]")
        else:
            text = f"row {i}: " + "words " * (i % 5 + 1)
            lines.append(json.dumps({"text": text}).encode())
            good.append(text)
    return lines, good, list(bad)


def test_cache_keeps_order_and_line_numbers_through_read_ahead(gpt2, tmp_path):
    lines, good, bad = texts_with_bad_lines()
    path = write_lines(tmp_path / "mixed.jsonl", lines)
    # batches of 6 lines: bad lines fall in the middle of a batch (7, 8 in the second, 20 in the fourth)
    [out] = cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2), batch_size=6)
    loaded = load_h5(out)["sequence"]
    eos = gpt2.eos_token_id
    assert [loaded[i].tolist() for i in range(len(loaded))] == [gpt2.encode(t) + [eos] for t in good]
    errors = [json.loads(line) for line in (tmp_path / "out" / "mixed.errors.jsonl").read_text().splitlines()]
    assert [e["line"] for e in errors] == bad
    assert [e["reason"] for e in errors] == ["invalid_json", "not_an_object", "not_an_object"]


def test_cache_raise_names_file_and_line_of_a_mid_batch_error(gpt2, tmp_path):
    lines, _, _ = texts_with_bad_lines(bad=(8,))
    path = write_lines(tmp_path / "mid.jsonl", lines)
    with pytest.raises(BadRowError, match=r"mid.jsonl:8: .*expected an object"):
        cache_jsonl(path, tmp_path / "out", ProcessorFactory.create("pt", gpt2), on_error="raise", batch_size=6)
    assert not ahead_threads()


class FailingSecondBatch:
    """A pt processor that fails on its second batch, as a downstream error would."""

    def __init__(self, inner):
        self.inner, self.calls = inner, 0

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def process_batch(self, rows):
        self.calls += 1
        if self.calls == 2:
            raise RuntimeError("encoder failed")
        return self.inner.process_batch(rows)


def open_paths() -> set[str]:
    fds = "/proc/self/fd"
    return {os.path.realpath(os.path.join(fds, fd)) for fd in os.listdir(fds) if os.path.exists(os.path.join(fds, fd))}


@pytest.mark.skipif(not os.path.isdir("/proc/self/fd"), reason="lists open files through /proc")
def test_a_downstream_error_stops_reading_and_closes_the_input(gpt2, tmp_path):
    lines, _, _ = texts_with_bad_lines(n=200, bad=())
    path = write_lines(tmp_path / "long.jsonl", lines)
    processor = FailingSecondBatch(ProcessorFactory.create("pt", gpt2))
    with pytest.raises(RuntimeError, match="encoder failed"):
        cache_jsonl(path, tmp_path / "out", processor, batch_size=5)
    # of 40 batches: the first, the failing second, and those submitted behind it: ``width`` queued
    # for the consumer plus the one the feeder holds (encode_ahead's docstring), which the single
    # worker may start before the consumer's exit cancels them
    assert processor.calls <= 2 + DEFAULT_WIDTH + 1
    assert not ahead_threads()
    assert str(path.resolve()) not in open_paths()
    assert not list((tmp_path / "out").glob("*.h5"))  # the partial output was discarded, as before
