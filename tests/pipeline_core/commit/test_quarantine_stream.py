"""Quarantined rows are streamed to disk: memory does not grow with their number (defect 9)."""

from __future__ import annotations

import json
import tracemalloc

from pipeline_core import errors
from pipeline_core.commit import quarantine
from pipeline_core.commit.quarantine import ErrorLog
from pipeline_core.errors import RowError

# Memory allocated from these files and still held: the log's own, and the rejected rows'. A
# process-wide peak would count whatever other threads of the test session allocate meanwhile.
OURS = (quarantine.__file__, errors.__file__, __file__)


def held_by_us(snapshot: tracemalloc.Snapshot) -> int:
    kept = snapshot.filter_traces([tracemalloc.Filter(True, name, all_frames=True) for name in OURS])
    return sum(stat.size for stat in kept.statistics("filename"))


def test_many_rejects_stay_out_of_memory_and_come_out_in_line_order(tmp_path):
    log = ErrorLog("in.jsonl", "skip")
    tracemalloc.start(10)
    for start in range(0, 200_000, 1000):  # batch by batch, each batch's errors in any order
        log.add_all([(line, RowError("invalid_json", "not JSON")) for line in range(start + 999, start - 1, -1)])
    held = held_by_us(tracemalloc.take_snapshot())
    tracemalloc.stop()
    assert held < 1 << 20, f"{held / (1 << 20):.1f} MiB held for 200,000 rejected rows"
    url = log.publish(str(tmp_path / "in.errors.jsonl"))
    with open(url, encoding="utf-8") as f:
        lines = [json.loads(raw) for raw in f]
    assert [e["line"] for e in lines] == list(range(200_000))
    assert lines[0] == {"source": "in.jsonl", "line": 0, "reason": "invalid_json", "field": None, "message": "not JSON"}
    assert log.counts == {"invalid_json": 200_000}
    log.close()
