"""cache_many: several chunks in one stream, each output hashed in a thread behind it; the results
come in order, and those finished before a later chunk fails are still handed over."""

from __future__ import annotations

import hashlib
import logging
from pathlib import Path

import h5py
import pytest
from prefect import flow

from flows.cache_flow import make_job
from flows.params import CacheParams
from tasks.cache import cache_many
from tasks.models import ChunkDigest


def rows(k: int, n: int) -> bytes:
    return b"".join(b'{"text": "chunk %d says row %d"}\n' % (k, i) for i in range(n))


@pytest.fixture()
def chunks(tmp_path):
    folder = tmp_path / "in"
    folder.mkdir()
    paths = []
    for k, n in enumerate((30, 5, 12, 7)):
        path = folder / f"train_chunk_{k}.jsonl"
        path.write_bytes(rows(k, n))
        paths.append(path)
    return paths


def job_for(folder, gpt2_path):
    tokenizer = {"path": str(gpt2_path), "eos_token": "<|endoftext|>"}
    return make_job(CacheParams(input=str(folder), output=str(folder.parent / "out"), tokenizer=tokenizer))


def digest_of(path, sha256: str | None = None) -> ChunkDigest:
    data = path.read_bytes()
    return ChunkDigest(url=str(path), sha256=sha256 or hashlib.sha256(data).hexdigest(), size=len(data))


@flow
def run_many(job, chunks: list[ChunkDigest]) -> tuple[list, str | None]:
    """Every result cache_many hands over, and the error it then raised (if any)."""
    taken = []
    try:
        for result in cache_many(job, chunks):
            taken.append(result)
    except RuntimeError as error:
        return taken, str(error)
    return taken, None


def test_results_come_in_order_with_each_output_file_s_own_sha256(chunks, gpt2_path):
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), [digest_of(p) for p in chunks])
    assert error is None
    assert [r.input_url for r in taken] == [str(p) for p in chunks]
    assert [r.rows_read for r in taken] == [30, 5, 12, 7]  # counted from the lines written above
    for result, path in zip(taken, chunks):
        written = Path(result.output_url).read_bytes()
        assert (result.sha256, result.size) == (hashlib.sha256(written).hexdigest(), len(written))
        assert result.source_sha256 == hashlib.sha256(path.read_bytes()).hexdigest()
        with h5py.File(result.output_url, "r") as f:
            assert f.attrs["source_sha256"] == result.source_sha256


def test_chunks_finished_before_a_failing_one_are_still_results(chunks, gpt2_path):
    found = [digest_of(p) for p in chunks]
    found[2] = digest_of(chunks[2], sha256="0" * 64)  # its read will not match: refused after chunks 0 and 1
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), found)
    assert error is not None and "train_chunk_2.jsonl changed while it was being cached" in error
    assert [r.input_url for r in taken] == [str(chunks[0]), str(chunks[1])]
    for result in taken:
        written = Path(result.output_url).read_bytes()
        assert result.sha256 == hashlib.sha256(written).hexdigest()
    assert not (chunks[0].parent.parent / "out" / "train_chunk_2.h5").exists()  # no partial output stands


class Lines(logging.Handler):
    def __init__(self) -> None:
        super().__init__(logging.INFO)
        self.lines: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.lines.append(record.getMessage())


@pytest.fixture()
def run_log():
    """The lines logged through the run loggers (a flow's, a task's) while the test runs."""
    handler, loggers = Lines(), [logging.getLogger("prefect.flow_runs"), logging.getLogger("prefect.task_runs")]
    for logger in loggers:
        logger.addHandler(handler)
    yield handler.lines
    for logger in loggers:
        logger.removeHandler(handler)


def chunk_lines(lines: list[str]) -> list[str]:
    return [line for line in lines if "samples," in line]


def test_few_chunks_log_a_line_each(chunks, gpt2_path, run_log):
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), [digest_of(p) for p in chunks])
    assert error is None
    assert chunk_lines(run_log) == [
        f"{r.output_url}: {r.samples_written} samples, 0 skipped, {r.seconds:.1f}s" for r in taken
    ]


def test_many_chunks_log_one_line_for_all_but_those_that_skipped_rows(chunks, gpt2_path, run_log, monkeypatch):
    import tasks.cache

    monkeypatch.setattr(tasks.cache, "CHUNK_LINES", 3)  # the 4 chunks are "many"
    chunks[1].write_bytes(rows(1, 2) + b'{"text": 7}\n' + rows(1, 2))  # line 3: not a string, skipped
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), [digest_of(p) for p in chunks])
    assert error is None and [r.rows_skipped for r in taken] == [0, 1, 0, 0]
    quiet = [taken[0], taken[2], taken[3]]
    assert chunk_lines(run_log) == [
        f"{taken[1].output_url}: {taken[1].samples_written} samples, 1 skipped, {taken[1].seconds:.1f}s",
        f"{taken[0].output_url} .. {taken[3].output_url} (3 chunks): {sum(r.samples_written for r in quiet)} samples, "
        f"0 skipped, {sum(r.seconds for r in quiet):.1f}s",
    ]


def test_a_failing_chunk_still_logs_the_quiet_ones_done_before_it(chunks, gpt2_path, run_log, monkeypatch):
    import tasks.cache

    monkeypatch.setattr(tasks.cache, "CHUNK_LINES", 1)
    found = [digest_of(p) for p in chunks]
    found[2] = digest_of(chunks[2], sha256="0" * 64)  # refused after chunks 0 and 1
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), found)
    assert error is not None and len(taken) == 2
    assert chunk_lines(run_log) == [
        f"{taken[0].output_url} .. {taken[1].output_url} (2 chunks): "
        f"{taken[0].samples_written + taken[1].samples_written} samples, 0 skipped, "
        f"{taken[0].seconds + taken[1].seconds:.1f}s"
    ]


def test_tasks_of_tiny_chunks_take_turns_in_one_process(tmp_path, gpt2_path, monkeypatch):
    import threading
    import time

    from prefect.task_runners import ThreadPoolTaskRunner

    import tasks.cache
    from tasks.cache import cache_chunk_batch

    folder = tmp_path / "in"
    folder.mkdir()
    for k in range(4):
        (folder / f"train_chunk_{k}.jsonl").write_bytes(rows(k, 3))  # ~100 bytes: tiny
    spans, real = [], tasks.cache.cache_many

    def timed(*args):
        started = time.monotonic()
        yield from real(*args)
        time.sleep(0.5)  # long enough for the other task to start meanwhile, were it let in
        spans.append((started, time.monotonic(), threading.current_thread().name))

    monkeypatch.setattr(tasks.cache, "cache_many", timed)
    urls = [str(folder / f"train_chunk_{k}.jsonl") for k in range(4)]

    @flow(task_runner=ThreadPoolTaskRunner(max_workers=2))
    def two_batches(job):
        futures = [cache_chunk_batch.submit(job, part, None, [None, None]) for part in (urls[:2], urls[2:])]
        return [f.result() for f in futures]

    results = two_batches(job_for(folder, gpt2_path))
    assert [len(r) for r in results] == [2, 2]
    (a_start, a_end, a_thread), (b_start, b_end, b_thread) = sorted(spans)
    assert a_thread != b_thread  # the runner ran them in two threads...
    assert b_start >= a_end  # ...one after the other


def test_a_lone_quiet_chunk_among_many_gets_its_own_line(chunks, gpt2_path, run_log, monkeypatch):
    import tasks.cache

    monkeypatch.setattr(tasks.cache, "CHUNK_LINES", 1)
    for k in (0, 1, 3):  # every chunk but the third skips a row
        chunks[k].write_bytes(rows(k, 2) + b'{"text": 7}\n')
    taken, error = run_many(job_for(chunks[0].parent, gpt2_path), [digest_of(p) for p in chunks])
    assert error is None and [r.rows_skipped for r in taken] == [1, 1, 0, 1]
    lone = taken[2]
    assert (
        chunk_lines(run_log)[-1] == f"{lone.output_url}: {lone.samples_written} samples, 0 skipped, {lone.seconds:.1f}s"
    )
    assert len(chunk_lines(run_log)) == 4
