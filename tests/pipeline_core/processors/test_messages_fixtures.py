"""Every fixture sample through sft/dpo with its converter: masked-in tokens are exactly the assistant turns.

Raw rows go in with ``converter=`` (what the cache stage does); the expectation is built by the
hand-written renderers of test_messages_helpers.py from the converted messages.
"""

import json

import numpy as np
import pytest

from pipeline_core import ProcessorFactory
from pipeline_core.processors.media import decode_media
from tests.pipeline_core.processors.test_messages_helpers import (
    FIXTURES,
    MEDIA,
    ROLE_TABLES,
    check_sample,
    expected_segments,
    fixture_rows,
    split_text,
)

SFT_FILES = [name for name, (_, kind) in FIXTURES.items() if kind == "sft"]
DPO_FILES = [name for name, (_, kind) in FIXTURES.items() if kind == "dpo"]


def processor(kind, tok, strategy, **kwargs):
    return ProcessorFactory.create_with_strategy_name(kind, tok, strategy, processor_kwargs=kwargs)


def media_of(messages):
    return [
        {"type": b["type"], "value": b["value"], "message": i}
        for i, m in enumerate(messages)
        for b in m["content"]
        if b["type"] in MEDIA
    ]


@pytest.mark.parametrize("strategy", ["chatml", "alpaca"])
@pytest.mark.parametrize("file_name", SFT_FILES)
def test_sft_fixture_masks_exactly_the_assistant_turns(trained, llamafactory, strategy, file_name):
    rows, convert = fixture_rows(llamafactory, file_name)
    batch = processor("sft", trained, strategy, converter=convert, media="keep").process_batch(rows)
    assert not batch.errors and batch.rows.tolist() == list(range(len(rows)))
    s = batch.samples
    for i, row in enumerate(rows):
        messages = convert(row)["messages"]
        full, in_text, out_text = split_text(expected_segments(messages, ROLE_TABLES[strategy]))
        check_sample(trained, s["sequence"][i], s["loss_mask"][i], s["loss_weight"][i], full, in_text, out_text)
        assert decode_media(s["media"][i]) == media_of(messages)


@pytest.mark.parametrize("strategy", ["chatml", "alpaca"])
@pytest.mark.parametrize("file_name", DPO_FILES)
def test_dpo_fixture_masks_the_last_assistant_turn(trained, llamafactory, strategy, file_name):
    rows, convert = fixture_rows(llamafactory, file_name)
    batch = processor("dpo", trained, strategy, converter=convert).process_batch(rows)
    assert not batch.errors and batch.n_samples == len(rows)
    s = batch.samples
    for i, row in enumerate(rows):
        pair = convert(row)
        for side in ("chosen", "rejected"):
            segments = expected_segments(pair[f"{side}_messages"], ROLE_TABLES[strategy], train_on="last")
            seq, mask, weight = s[side][i], s[f"{side}_mask"][i], s[f"{side}_weight"][i]
            check_sample(trained, seq, mask, weight, *split_text(segments))
            last = pair[f"{side}_messages"][-1]["content"][0]["value"]
            assert trained.decode(seq[mask].tolist()).startswith(last)


def test_glaive_tool_turns(trained, llamafactory):
    """Observations, tool definitions and (by default) function calls are masked out; answers are in."""
    rows, convert = fixture_rows(llamafactory, "glaive_toolcall_en_demo.json")
    on = processor("sft", trained, "chatml", converter=convert, train_tool_calls=True).process_batch(rows).samples
    off = processor("sft", trained, "chatml", converter=convert).process_batch(rows).samples
    for i, row in enumerate(rows):
        turns = row["conversations"]
        trained_on = trained.decode(on["sequence"][i][on["loss_mask"][i]].tolist())
        trained_off = trained.decode(off["sequence"][i][off["loss_mask"][i]].tolist())
        if json.loads(row["tools"] or "[]"):
            assert row["tools"] in trained.decode(on["sequence"][i].tolist()) and row["tools"] not in trained_on
        for t in turns:
            if t["from"] == "observation":
                assert t["value"] not in trained_on
            if t["from"] == "gpt":
                assert t["value"] in trained_on and t["value"] in trained_off
            if t["from"] == "function_call":
                assert t["value"] in trained_on and t["value"] not in trained_off
        assert np.array_equal(on["sequence"][i], off["sequence"][i])


def test_mllm_media_skip_is_counted_per_row(trained, llamafactory):
    rows, convert = fixture_rows(llamafactory, "mllm_demo.json")
    batch = processor("sft", trained, "chatml", converter=convert).process_batch(rows)
    assert batch.n_samples == 0
    assert [e.reason for _, e in batch.errors] == ["unsupported_content:image_url"] * len(rows)
    assert all(e.field.endswith(".content[0]") or ".content[" in e.field for _, e in batch.errors)
