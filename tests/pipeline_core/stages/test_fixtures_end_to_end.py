"""Every LLaMA-Factory fixture through export (with its dataset_info entry and converter) and then
through cache (the matching processor): every exported row is a sample or a counted skip, and the
trained tokens of every sample decode to assistant text only."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from pipeline_core import BadRowError, ProcessorFactory, cache_jsonl, export_source, load_h5, read_attrs
from tests.pipeline_core.sources.test_sources_dataset_info import FIXTURES, fixture_entries

pytestmark = pytest.mark.usefixtures("hf_offline")

PROCESSOR = {"c4_demo": "pt", "dpo_en_demo": "dpo", "v1_dpo_demo": "dpo"}


@pytest.fixture(scope="module")
def info_yaml(llamafactory, tmp_path_factory):
    path = tmp_path_factory.mktemp("e2e") / "dataset_info.yaml"
    path.write_text(yaml.safe_dump(fixture_entries(llamafactory)))
    return path


def assistant_texts(messages):
    return [b["value"] for m in messages if m["role"] == "assistant" for b in m["content"] if b["type"] == "text"]


@pytest.mark.parametrize("name", FIXTURES)
def test_fixture_through_export_and_cache(name, info_yaml, trained, tmp_path):
    exported = export_source(str(info_yaml), tmp_path / "jsonl", chunk_size=100, datasets=[name])
    kind = PROCESSOR.get(name, "sft")
    processor = ProcessorFactory.create(kind, trained, **({} if kind == "pt" else {"media": "keep"}))
    outputs = cache_jsonl(exported.urls, tmp_path / "h5", processor)
    rows = sum(c.rows_out for c in exported.chunks)
    attrs = [read_attrs(o) for o in outputs]
    assert sum(a["rows_read"] for a in attrs) == rows == exported.rows_in - exported.rows_failed
    assert sum(a["samples_written"] + a["rows_skipped"] for a in attrs) == rows
    if kind == "sft":
        for url, out in zip(exported.urls, outputs):
            lines = [json.loads(line) for line in Path(url).read_text(encoding="utf-8").splitlines()]
            data = load_h5(out)
            kept = iter(range(len(data["sequence"])))
            skipped = read_attrs(out)["rows_skipped"]
            assert skipped == 0, read_attrs(out)["skipped_by_reason"]
            for line in lines:
                i = next(kept)
                trained_text = trained.decode(data["sequence"][i][data["loss_mask"][i]].tolist())
                for text in assistant_texts(line["messages"]):
                    assert text in trained_text


BAD_ROWS = [
    ("sharegpt", {"conversations": [{"from": "human", "value": "hi"}, {"from": "bot", "value": "x"}]}, "unknown_role"),
    ("alpaca", {"instruction": "do it", "input": ""}, "missing_field"),
    ("messages", {"messages": [{"role": "user", "content": "not a list"}]}, "wrong_type"),
]


@pytest.mark.parametrize(("converter", "row", "reason"), BAD_ROWS)
def test_bad_rows_are_skipped_with_reason_or_raised_with_file_and_line(converter, row, reason, trained, tmp_path):
    good = {
        "sharegpt": {"conversations": [{"from": "human", "value": "q"}, {"from": "gpt", "value": "a"}]},
        "alpaca": {"instruction": "q", "input": "", "output": "a"},
        "messages": {
            "messages": [
                {"role": "user", "content": [{"type": "text", "value": "q"}]},
                {"role": "assistant", "content": [{"type": "text", "value": "a"}]},
            ]
        },
    }[converter]
    path = tmp_path / "rows.jsonl"
    path.write_text("".join(json.dumps(r) + "\n" for r in (good, row, good)))
    processor = ProcessorFactory.create("sft", trained, converter=converter)
    [out] = cache_jsonl(path, tmp_path / "skip", processor)
    attrs = read_attrs(out)
    assert attrs["samples_written"] == 2 and attrs["skipped_by_reason"] == {reason: 1}
    errors = [json.loads(line) for line in (tmp_path / "skip" / "rows.errors.jsonl").read_text().splitlines()]
    assert [(e["line"], e["reason"]) for e in errors] == [(2, reason)]
    with pytest.raises(BadRowError, match=rf"rows.jsonl:2: field '[^']+'.*\(reason: {reason}\)"):
        cache_jsonl(path, tmp_path / "raise", processor, on_error="raise")
