"""Retries and concurrent runs are idempotent: every row ends up in the output exactly once.

- A processor fails with a transient error after half the rows of its chunk had been written to
  the staging file; the task is retried and the output holds each row once.
- Two runs of the same stage into the same folder at the same time (two processes) both succeed,
  and the outputs verify and hold each row once. (A kill then a rerun: see test_kill_local.)
"""

from __future__ import annotations

import filecmp

import pytest
from prefect.settings import PREFECT_API_URL

from flows.cache_flow import cache_flow
from pipeline_core.commit.verify import h5_problems, verify_output
from pipeline_core.processors import ProcessorFactory
from pipeline_core.processors.pt import PretrainProcessor
from pipeline_core.stages.cache import cache_jsonl
from tasks.retry import TransientIOError
from tests.reliability.helpers import (
    assert_exactly_once,
    cache_params,
    hidden,
    published,
    start_worker,
    write_chunks,
    write_jsonl,
)


class FailsOnceMidChunk(PretrainProcessor):
    """pt, but the first batch after ``fail_after`` rows raises a transient error, once."""

    fail_after = 0
    seen = 0
    failed_at: int | None = None

    def process_batch(self, rows):
        cls = type(self)
        if cls.failed_at is None and cls.seen >= cls.fail_after:
            cls.failed_at = cls.seen
            raise TransientIOError(f"injected: connection lost after {cls.seen} rows")
        cls.seen += len(rows)
        return super().process_batch(rows)


@pytest.fixture()
def fails_once_mid_chunk():
    name = "test_fails_once_mid_chunk"
    ProcessorFactory.register(name)(FailsOnceMidChunk)
    FailsOnceMidChunk.seen, FailsOnceMidChunk.failed_at = 0, None
    yield name, FailsOnceMidChunk
    ProcessorFactory._registry.pop(name)


def test_a_transient_error_after_half_the_rows_is_retried_without_duplicates(
    fails_once_mid_chunk, gpt2_path, gpt2, tmp_path, c4_texts, c4_rows
):
    name, processor = fails_once_mid_chunk
    processor.fail_after = len(c4_rows) // 2
    write_jsonl(tmp_path / "in" / "train_chunk_0.jsonl", c4_rows)
    out = tmp_path / "out"
    result = cache_flow(
        cache_params(gpt2_path, tmp_path / "in", out, processor=name, batch_size=16, run={"retries": 2})
    )

    assert len(c4_rows) // 2 <= processor.failed_at < len(c4_rows)  # it failed mid-chunk, once ...
    assert processor.seen == processor.failed_at + len(c4_rows)  # ... and the retry redid the whole chunk
    assert result["summary"]["samples_written"] == len(c4_rows)
    assert_exactly_once(out / "train_chunk_0.h5", gpt2, c4_texts)
    assert hidden(out) == [] and verify_output(str(out)).ok


def test_two_concurrent_cache_processes_on_one_output_each_row_once(tmp_path, gpt2, gpt2_path, c4_rows, c4_texts):
    inputs = write_chunks(tmp_path / "in", c4_rows * 8, 2)
    reference = tmp_path / "reference"
    cache_jsonl(str(inputs), str(reference), ProcessorFactory.create("pt", gpt2), batch_size=64)
    out = tmp_path / "out"

    workers = [start_worker("cache", inputs, out, gpt2_path, 64) for _ in range(2)]
    for worker in workers:
        assert worker.wait(timeout=300) == 0, worker.stderr.read()[-3000:]

    assert [p.name for p in published(out)] == ["train_chunk_0.h5", "train_chunk_1.h5"]
    for path in published(out):
        assert h5_problems(str(path)) == []
        assert filecmp.cmp(path, reference / path.name, shallow=False)
    half = len(c4_texts) * 4
    assert_exactly_once(out / "train_chunk_0.h5", gpt2, (c4_texts * 8)[:half])
    assert hidden(out) == []


@pytest.mark.slow
def test_two_concurrent_cache_flow_runs_on_one_output_each_row_once(tmp_path, gpt2, gpt2_path, c4_rows, c4_texts):
    inputs = write_chunks(tmp_path / "in", c4_rows, 3)
    out = tmp_path / "out"
    # the second run waits for the first one's lock on the folder (issue 17), then reuses its chunks
    params = cache_params(gpt2_path, inputs, out, run={"lock_timeout": 600}).model_dump_json()
    env = {"PREFECT_API_URL": PREFECT_API_URL.value()}

    workers = [start_worker("cache-flow", params, env=env) for _ in range(2)]
    for worker in workers:
        assert worker.wait(timeout=600) == 0, worker.stderr.read()[-5000:]

    report = verify_output(str(out))
    assert report.ok, report.lines()
    per = len(c4_texts) // 3
    for i in range(3):
        assert_exactly_once(out / f"train_chunk_{i}.h5", gpt2, c4_texts[i * per : (i + 1) * per])
    assert hidden(out) == []
