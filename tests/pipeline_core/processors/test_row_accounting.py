"""Row accounting of the cache stage, counted by hand from the rows written here.

Every input row is written (at least one sample kept) or skipped (none kept, one errors.jsonl
entry): ``rows_read = rows_written + rows_skipped``. With ``rewritten="per_turn"`` a row gives one
sample per assistant turn, so ``samples_written`` may exceed ``rows_written``; a turn dropped from
a row whose other turns were written is counted in ``samples_dropped`` and listed in errors.jsonl
under its row's line. ``h5_problems`` (what ``h5pipe verify`` runs) must find nothing wrong.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import h5py
import pytest
from tokenizers import Tokenizer

from pipeline_core import AutoTokenizer, ProcessorFactory, cache_jsonl
from pipeline_core.commit.quarantine import ErrorRateExceeded
from pipeline_core.commit.verify import h5_problems
from pipeline_core.formats.h5 import read_attrs
from pipeline_core.stages.cache import CacheOptions, cache_file
from tests.pipeline_core.chat.families import family_folder

MAX_LENGTH = 120
SHORT = "hello there"
LONG = "fine " * 300  # about 300 GPT-2 tokens: far over MAX_LENGTH on its own
BROKEN = "{not json"


def text(kind: str, value: str) -> dict:
    return {"type": kind, "value": value}


def conversation(*answers: str) -> dict:
    """User/assistant pairs; every answer carries reasoning, which Qwen3's template drops from
    earlier turns (history rewritten), so per_turn makes one sample per answer."""
    messages = []
    for k, answer in enumerate(answers):
        messages.append({"role": "user", "content": [text("text", f"question {k}")]})
        messages.append({"role": "assistant", "content": [text("reasoning", f"think {k}"), text("text", answer)]})
    return {"messages": messages}


def write_lines(path: Path, rows: list) -> Path:
    """One line per row; a str is written as is (a line that is not JSON)."""
    lines = [r if isinstance(r, str) else json.dumps(r) for r in rows]
    path.write_text("".join(line + "\n" for line in lines), encoding="utf-8")
    return path


def errors_of(h5_url: str) -> list[dict]:
    path = Path(h5_url[: -len(".h5")] + ".errors.jsonl")
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]


def counters(attrs: dict) -> dict:
    names = ("rows_read", "rows_written", "rows_skipped", "samples_written", "samples_dropped")
    return {name: attrs.get(name) for name in names}


@pytest.fixture(scope="module")
def qwen3(tmp_path_factory) -> AutoTokenizer:
    return AutoTokenizer.from_file(family_folder("qwen3", tmp_path_factory.mktemp("qwen3")))


def per_turn(tok: AutoTokenizer, max_length: int | None = None):
    return ProcessorFactory.create_with_strategy_name(
        "sft", tok, "template", processor_kwargs={"max_length": max_length}, rewritten="per_turn"
    )


def test_the_long_and_short_texts_sit_on_either_side_of_max_length(gpt2_path):
    raw = Tokenizer.from_file(str(gpt2_path))  # the plain tokenizers library, not h5pipe
    assert len(raw.encode(LONG).ids) > 2 * MAX_LENGTH
    texts = [part["value"] for m in conversation(SHORT, SHORT)["messages"] for part in m["content"]]
    assert sum(len(raw.encode(t).ids) for t in texts) < MAX_LENGTH // 4  # leaves room for the template's markup


def test_per_turn_counts_rows_and_samples_apart(qwen3, tmp_path):
    rows = [conversation(SHORT, SHORT), conversation(SHORT), BROKEN]
    [out] = cache_jsonl(write_lines(tmp_path / "in.jsonl", rows), tmp_path / "out", per_turn(qwen3))
    attrs = read_attrs(out)
    # line 1: two answers -> two samples; line 2: one; line 3 is not JSON
    expected = {"rows_read": 3, "rows_written": 2, "rows_skipped": 1, "samples_written": 3, "samples_dropped": 0}
    assert counters(attrs) == expected
    assert [(e["line"], e["reason"]) for e in errors_of(out)] == [(3, "invalid_json")]
    assert h5_problems(out) == []


def test_a_dropped_turn_is_counted_once_and_its_row_stays_written(qwen3, tmp_path):
    rows = [
        conversation(SHORT, LONG),  # line 1: turn 1 kept, turn 2 too long -> written, one turn dropped
        conversation(SHORT),  # line 2: written
        conversation(LONG),  # line 3: its only turn too long -> skipped
        conversation(LONG, LONG),  # line 4: both turns too long -> skipped, listed once
    ]
    [out] = cache_jsonl(write_lines(tmp_path / "in.jsonl", rows), tmp_path / "out", per_turn(qwen3, MAX_LENGTH))
    attrs = read_attrs(out)
    expected = {"rows_read": 4, "rows_written": 2, "rows_skipped": 2, "samples_written": 2, "samples_dropped": 1}
    assert counters(attrs) == expected
    assert attrs["skipped_by_reason"] == {"too_long": 2}
    assert attrs["samples_dropped_by_reason"] == {"too_long": 1}
    entries = errors_of(out)
    assert Counter(e["line"] for e in entries) == {1: 1, 3: 1, 4: 1}
    assert {e["reason"] for e in entries} == {"too_long"}
    [dropped_turn] = [e for e in entries if e["line"] == 1]
    assert "turn 2 of 2" in dropped_turn["message"]
    assert (dropped_turn["turn"], dropped_turn["turns"]) == (2, 2)
    by_line = {e["line"]: e for e in entries}
    assert "turn" not in by_line[3]  # its row made one sample
    assert (by_line[4]["turn"], by_line[4]["turns"]) == (1, 2)  # skipped, listed once, by its first turn
    assert h5_problems(out) == []


def test_a_turn_too_long_for_its_pack_is_named_by_its_turn(qwen3, tmp_path):
    rows = [conversation(SHORT, LONG), conversation(SHORT)]  # line 1: turn 1 fits a pack, turn 2 does not
    path = write_lines(tmp_path / "in.jsonl", rows)
    options = CacheOptions(pack_size=MAX_LENGTH, packing="bfd")
    stats = cache_file(str(path), str(tmp_path / "out"), per_turn(qwen3), options)
    assert (stats.rows_written, stats.rows_skipped, stats.samples_written, stats.samples_dropped) == (2, 0, 2, 1)
    [entry] = errors_of(stats.output_url)
    assert (entry["line"], entry["reason"], entry["turn"], entry["turns"]) == (1, "too_long_for_pack", 2, 2)
    assert entry["message"].startswith("trained turn 2 of 2")


def test_max_error_rate_counts_rows_not_turns(qwen3, tmp_path):
    rows = [conversation(SHORT, LONG), conversation(SHORT), conversation(LONG), conversation(LONG, LONG)]
    path = write_lines(tmp_path / "in.jsonl", rows)
    # 2 of 4 rows skipped = 50%: within the limit, although errors.jsonl has 3 entries (75%)
    stats = cache_file(str(path), str(tmp_path / "ok"), per_turn(qwen3, MAX_LENGTH), CacheOptions(max_error_rate=0.5))
    assert (stats.rows_read, stats.rows_skipped, stats.samples_dropped) == (4, 2, 1)
    with pytest.raises(ErrorRateExceeded, match="2 of 4 rows"):
        cache_file(str(path), str(tmp_path / "over"), per_turn(qwen3, MAX_LENGTH), CacheOptions(max_error_rate=0.4))


def alpaca_without_end_token(gpt2, overflow: str):
    return ProcessorFactory.create_with_strategy_name(
        "sft",
        gpt2,
        "alpaca",
        processor_kwargs={"max_length": 40, "train_on_eos": "none", "overflow": overflow},
        response_suffix="\n",
    )


@pytest.mark.parametrize("overflow", ["drop", "truncate"])
def test_a_row_failing_two_checks_is_skipped_once(gpt2, tmp_path, overflow):
    rows = [
        {"query": "short", "response": "ok"},  # line 1: no end token
        {"query": "long " * 50, "response": "answer " * 50},  # line 2: no end token, and over max_length
        {"query": "no response"},  # line 3: missing field
    ]
    path = write_lines(tmp_path / "in.jsonl", rows)
    [out] = cache_jsonl(path, tmp_path / "out", alpaca_without_end_token(gpt2, overflow))
    attrs = read_attrs(out)
    expected = {"rows_read": 3, "rows_written": 0, "rows_skipped": 3, "samples_written": 0, "samples_dropped": 0}
    assert counters(attrs) == expected
    assert attrs["rows_truncated"] == 0  # line 2 is skipped, not cut
    # the first reason found wins: the mask controls run before the length check
    assert attrs["skipped_by_reason"] == {"no_end_token": 2, "missing_field": 1}
    lines = [(e["line"], e["reason"]) for e in errors_of(out)]
    assert lines == [(1, "no_end_token"), (2, "no_end_token"), (3, "missing_field")]
    assert h5_problems(out) == []


def test_dpo_lists_each_skipped_pair_once(gpt2, tmp_path):
    rows = [
        {"query": "q", "chosen": "yes", "rejected": "no"},  # line 1: written
        {"query": "q", "chosen": "yes"},  # line 2: missing field
        {"query": "long " * 50, "chosen": "a " * 50, "rejected": "b"},  # line 3: over max_length
    ]
    dpo = ProcessorFactory.create("dpo", gpt2, strategy="alpaca", max_length=40)
    [out] = cache_jsonl(write_lines(tmp_path / "in.jsonl", rows), tmp_path / "out", dpo)
    attrs = read_attrs(out)
    expected = {"rows_read": 3, "rows_written": 1, "rows_skipped": 2, "samples_written": 1, "samples_dropped": 0}
    assert counters(attrs) == expected
    assert [(e["line"], e["reason"]) for e in errors_of(out)] == [(2, "missing_field"), (3, "too_long")]
    assert h5_problems(out) == []


def strip_new_counters(url: str, **attrs) -> None:
    """Make a file look written before rows_written existed (old attributes, values as given)."""
    with h5py.File(url, "r+") as f:
        for name in ("rows_written", "samples_dropped", "samples_dropped_by_reason"):
            if name in f.attrs:
                del f.attrs[name]
        for name, value in attrs.items():
            f.attrs[name] = value


def test_verify_keeps_reading_files_from_before_rows_written(gpt2, tmp_path):
    rows = [{"query": "q", "response": "r"}, BROKEN]
    sft = ProcessorFactory.create("sft", gpt2, strategy="alpaca")
    [out] = cache_jsonl(write_lines(tmp_path / "in.jsonl", rows), tmp_path / "out", sft)
    strip_new_counters(out)
    assert h5_problems(out) == []  # an old one-sample-per-row file holds the old rule


def two_answers(tok: AutoTokenizer, folder: Path) -> str:
    """The file of one row with two answers, cached with per_turn (two samples)."""
    [out] = cache_jsonl(write_lines(folder / "in.jsonl", [conversation(SHORT, SHORT)]), folder / "out", per_turn(tok))
    return out


def test_verify_calls_an_old_per_turn_file_bad(qwen3, tmp_path):
    out = two_answers(qwen3, tmp_path)
    strip_new_counters(out, rows_read=1, samples_written=2, rows_skipped=0)  # as the old code wrote it
    assert h5_problems(out) == ["rows_read != samples_written + rows_skipped"]


def test_verify_checks_the_row_identity_of_new_files(qwen3, tmp_path):
    out = two_answers(qwen3, tmp_path)
    with h5py.File(out, "r+") as f:
        f.attrs["rows_written"] = 2
    assert h5_problems(out) == ["rows_read != rows_written + rows_skipped"]
    with h5py.File(out, "r+") as f:
        f.attrs["rows_read"], f.attrs["rows_written"], f.attrs["samples_written"] = 3, 3, 2
    assert h5_problems(out)[-1] == "2 samples written from 3 written rows (each keeps at least one)"


def test_verify_wants_a_quarantine_line_per_dropped_turn(qwen3, tmp_path):
    path = write_lines(tmp_path / "in.jsonl", [conversation(SHORT, LONG)])
    [out] = cache_jsonl(path, tmp_path / "out", per_turn(qwen3, MAX_LENGTH))
    assert (read_attrs(out)["rows_skipped"], read_attrs(out)["samples_dropped"]) == (0, 1)
    Path(out[: -len(".h5")] + ".errors.jsonl").unlink()  # as if killed between the two publishes
    assert h5_problems(out) == ["0 rows skipped and 1 samples dropped but 0 in in.errors.jsonl (a partial publish)"]


def test_bfd_truncate_drops_a_sample_whose_prompt_fills_the_pack(gpt2, tmp_path):
    """overflow='truncate' cuts a sample to pack_size; one whose prompt alone fills the pack would
    keep no trained token (a pack of -100 labels) and is skipped as prompt_too_long instead, as
    max_length's truncation does. Which rows those are is counted from the tokenizer's own ids."""
    pack_size = 24
    rows = [{"query": "word " * n, "response": "answer " * 10} for n in (2, 10, 30, 60)]
    processor = ProcessorFactory.create_with_strategy_name(
        "sft", gpt2, "alpaca", processor_kwargs={"overflow": "truncate"}
    )
    prompts = [len(processor.strategy.assemble_prompt(gpt2.encode(r["query"]))) for r in rows]
    expected = [line for line, n in enumerate(prompts, 1) if n >= pack_size]
    assert expected and len(expected) < len(rows)
    path = write_lines(tmp_path / "in.jsonl", rows)
    stats = cache_file(
        str(path), str(tmp_path / "out"), processor, CacheOptions(pack_size=pack_size, pad_value=0, packing="bfd")
    )
    assert [(e["line"], e["reason"]) for e in errors_of(stats.output_url)] == [(n, "prompt_too_long") for n in expected]
    packed = h5py.File(stats.output_url)
    assert all(mask.any() for mask in packed["loss_mask"][...])  # every pack trains something
    assert stats.rows_written == len(rows) - len(expected) and h5_problems(stats.output_url) == []
