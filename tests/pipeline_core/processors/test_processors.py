"""Processors on the real fixture data, checked against independently encoded segments."""

import numpy as np
import pytest
from tokenizers import Tokenizer

from pipeline_core import ConfigError, ProcessorFactory, RowError, StrategyFactory, TextNormalizer
from tests.conftest import load_json_or_jsonl


def alpaca_rows(llamafactory):
    rows = load_json_or_jsonl(llamafactory / "alpaca_en_demo.json")
    return [
        {"query": r["instruction"] + ("\n" + r["input"] if r["input"] else ""), "response": r["output"]} for r in rows
    ]


def dpo_rows(llamafactory):
    rows = []
    for r in load_json_or_jsonl(llamafactory / "dpo_en_demo.json"):
        last_human = [t["value"] for t in r["conversations"] if t["from"] == "human"][-1]
        rows.append({"query": last_human, "chosen": r["chosen"]["value"], "rejected": r["rejected"]["value"]})
    return rows


def test_pt_on_c4_equals_raw_tokenizers_plus_eos(gpt2, gpt2_path, llamafactory):
    raw = Tokenizer.from_file(str(gpt2_path))
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")
    processor = ProcessorFactory.create("pt", gpt2)
    batch = processor.process_batch(rows)
    assert batch.n_samples == len(rows) == 300 and not batch.errors
    for i, row in enumerate(rows):
        expected = raw.encode(row["text"]).ids + [50256]
        assert batch.samples["sequence"][i].tolist() == expected
    single = processor.process(rows[0])
    assert single["sequence"].dtype.is_floating_point is False
    assert single["sequence"].tolist() == raw.encode(rows[0]["text"]).ids + [50256]


@pytest.mark.parametrize("add_bos", [False, True])
def test_pt_truncation_keeps_bos_and_eos_as_tokenizers_truncation_does(gpt2_path, llamafactory, add_bos):
    """A cut document lost its eos: in Megatron's stream of documents it ran into the next one with
    no eod between. tokenizers' own truncation cuts the text and keeps the tokens its post-processor
    adds; the expectation is computed by it."""
    from tokenizers.processors import TemplateProcessing

    from pipeline_core import AutoTokenizer

    tok = AutoTokenizer.from_file(gpt2_path, eos_token="<|endoftext|>", bos_token="<|endoftext|>")
    raw = Tokenizer.from_file(str(gpt2_path))
    single = ("<|endoftext|> " if add_bos else "") + "$A <|endoftext|>"
    raw.post_processor = TemplateProcessing(single=single, special_tokens=[("<|endoftext|>", 50256)])
    rows = load_json_or_jsonl(llamafactory / "c4_demo.jsonl")[:40] + [{"text": "Hi"}]
    whole = [len(raw.encode(r["text"]).ids) for r in rows]
    for max_length in (3, 6, 64):
        raw.enable_truncation(max_length=max_length)
        processor = ProcessorFactory.create("pt", tok, max_length=max_length, overflow="truncate", add_bos=add_bos)
        batch = processor.process_batch(rows)
        assert batch.n_samples == len(rows) and batch.truncated == sum(n > max_length for n in whole) > 0
        assert [s.tolist() for s in batch.samples["sequence"]] == [raw.encode(r["text"]).ids for r in rows]
    assert processor.describe()["truncation"] == "keeps_bos_eos"  # outputs cut the old way get other keys


def test_pt_needs_eos(gpt2_path):
    from pipeline_core import AutoTokenizer

    with pytest.raises(ConfigError, match="eos_token"):
        ProcessorFactory.create("pt", AutoTokenizer.from_file(gpt2_path))


@pytest.mark.parametrize("strategy_name", ["chatml", "alpaca"])
def test_sft_on_alpaca(trained, llamafactory, strategy_name):
    strategy = StrategyFactory.create(strategy_name, trained)
    processor = ProcessorFactory.create_with_strategy("sft", trained, strategy)
    rows = alpaca_rows(llamafactory)
    batch = processor.process_batch(rows)
    assert batch.n_samples == len(rows) and not batch.errors
    suffix_text = {"chatml": "<｜im▁end｜>\n", "alpaca": "<｜end▁of▁sentence｜>"}[strategy_name]
    for i, row in enumerate(rows):
        seq, mask = batch.samples["sequence"][i], batch.samples["loss_mask"][i]
        expected = strategy.assemble_prompt(trained.encode(row["query"])) + strategy.assemble_response(
            trained.encode(row["response"])
        )
        assert seq.tolist() == expected
        assert mask.size == seq.size and mask.dtype == np.bool_
        assert trained.decode(seq[mask]) == row["response"] + suffix_text
        assert not mask[: len(strategy.assemble_prompt(trained.encode(row["query"])))].any()


def test_dpo_on_dpo_en_demo(trained, llamafactory):
    processor = ProcessorFactory.create_with_strategy_name("dpo", trained, "chatml")
    rows = dpo_rows(llamafactory)
    batch = processor.process_batch(rows)
    s = processor.strategy
    assert batch.n_samples == len(rows)
    for i, row in enumerate(rows):
        prompt = s.assemble_prompt(trained.encode(row["query"]))
        for side in ("chosen", "rejected"):
            seq, mask = batch.samples[side][i], batch.samples[f"{side}_mask"][i]
            assert seq.tolist() == prompt + s.assemble_response(trained.encode(row[side]))
            assert trained.decode(seq[mask]) == row[side] + "<｜im▁end｜>\n"
            assert seq[: len(prompt)].tolist() == prompt and not mask[: len(prompt)].any()
    out = processor.process(rows[0])
    assert set(out) == {"chosen", "chosen_mask", "rejected", "rejected_mask"}


def test_bad_rows_are_reported_not_dropped(trained):
    processor = ProcessorFactory.create("sft", trained)
    rows = [
        {"query": "q", "response": "r"},
        {"query": "q"},
        {"query": 3, "response": "r"},
        {"query": " ", "response": "r"},
        ["x"],
    ]
    batch = processor.process_batch(rows)
    assert batch.rows.tolist() == [0]
    assert [(i, e.reason, e.field) for i, e in batch.errors] == [
        (1, "missing_field", "response"),
        (2, "wrong_type", "query"),
        (3, "empty_text", "query"),
        (4, "not_an_object", None),
    ]
    with pytest.raises(RowError, match="missing field 'response'"):
        processor.process({"query": "q"})


def test_max_length_drop_and_truncate(trained):
    rows = [
        {"query": "short", "response": "ok"},
        {"query": "short", "response": "word " * 200},
        {"query": "word " * 200, "response": "x"},
    ]
    drop = ProcessorFactory.create("sft", trained, max_length=64).process_batch(rows)
    assert drop.rows.tolist() == [0] and [e.reason for _, e in drop.errors] == ["too_long", "too_long"]
    cut = ProcessorFactory.create("sft", trained, max_length=64, overflow="truncate").process_batch(rows)
    assert cut.rows.tolist() == [0, 1] and cut.truncated == 1
    assert [e.reason for _, e in cut.errors] == ["prompt_too_long"]
    assert cut.samples["sequence"].lengths[1] == 64 == cut.samples["loss_mask"].lengths[1]
    full = ProcessorFactory.create("sft", trained).process_batch(rows[1:2]).samples["sequence"][0]
    assert cut.samples["sequence"][1].tolist() == full[:64].tolist()


def test_normalizer_applies_before_encoding(trained):
    processor = ProcessorFactory.create("pt", trained, normalizer=TextNormalizer())
    out = processor.process({"text": "\u201cquoted\u201d \u2014 yes\u2026"})["sequence"].tolist()
    assert trained.decode(out[:-1]) == '"quoted" - yes...'
    assert processor.describe()["normalizer"]["\u2014"] == "-"


def test_unknown_processor_lists_registered(trained):
    with pytest.raises(ConfigError, match="dpo, .*pt, sft"):
        ProcessorFactory.create("rm", trained)


def test_register_custom_processor(trained):
    from pipeline_core import Processor
    from pipeline_core.processors.base import ProcessedBatch

    @ProcessorFactory.register("lengths")
    class Lengths(Processor):
        groups = {"sequence": ("sequence",)}

        def process_batch(self, rows):
            ids = self.tokenizer.encode_ragged([r["text"] for r in rows])
            return ProcessedBatch({"sequence": ids}, np.arange(len(rows)))

    out = ProcessorFactory.create("lengths", trained).process({"text": "abc"})
    assert out["sequence"].tolist() == trained.encode("abc")


def test_dpo_pairs_must_share_their_prompt(trained, llamafactory):
    """Every pair of LLaMA-Factory's v1 demo shares its prompt and is kept; a pair whose sides
    answer different prompts (or one prompt holding an extra turn) is skipped as prompt_mismatch,
    naming the first message that differs."""
    processor = ProcessorFactory.create_with_strategy_name("dpo", trained, "chatml")
    rows = load_json_or_jsonl(llamafactory / "v1_dpo_demo.jsonl")
    batch = processor.process_batch(rows)
    assert batch.errors == [] and batch.n_samples == len(rows)

    def turn(role, text):
        return {"role": role, "content": [{"type": "text", "value": text}]}

    other = {"chosen_messages": [turn("user", "2+2?"), turn("assistant", "4")]}
    other["rejected_messages"] = [turn("user", "3+3?"), turn("assistant", "5")]
    longer = {"chosen_messages": other["chosen_messages"]}
    longer["rejected_messages"] = [turn("system", "Be brief."), turn("user", "2+2?"), turn("assistant", "5")]
    same = {
        "chosen_messages": other["chosen_messages"],
        "rejected_messages": [turn("user", "2+2?"), turn("assistant", "5")],
    }
    named = {
        "chosen_messages": [{**turn("user", "2+2?"), "name": "ann"}, turn("assistant", "4")],
        "rejected_messages": [{**turn("user", "2+2?"), "name": "bob"}, turn("assistant", "5")],
    }  # a template that writes message.name renders two prompts
    call = {"role": "assistant", "content": [{"type": "tool_calls", "value": '{"name": "add", "arguments": {}}'}]}
    absent = {
        "chosen_messages": [
            turn("user", "2+2?"),
            {**call, "content_absent": True},
            turn("tool", "4"),
            turn("assistant", "4"),
        ],
        "rejected_messages": [turn("user", "2+2?"), call, turn("tool", "4"), turn("assistant", "5")],
    }  # the template gets no content on one side and "" on the other: a template testing for it renders two prompts
    batch = processor.process_batch([other, same, longer, named, absent])
    assert [(i, e.reason, e.field) for i, e in batch.errors] == [
        (0, "prompt_mismatch", "rejected_messages[0]"),
        (2, "prompt_mismatch", "rejected_messages[0]"),
        (3, "prompt_mismatch", "rejected_messages[0]"),
        (4, "prompt_mismatch", "rejected_messages[1]"),
    ]
    assert batch.n_samples == 1


@pytest.mark.parametrize("strategy", ["chatml", "template"])
@pytest.mark.parametrize("kind", ["sft", "dpo"])
def test_a_flat_row_with_a_system_history_or_tools_is_refused_not_dropped(tmp_path, kind, strategy):
    """A query/response row carries no system prompt, history or tools: they were dropped without
    a word. With converter='alpaca' they are read (tests/pipeline_core/converters)."""
    from pipeline_core import AutoTokenizer
    from tests.pipeline_core.chat.families import family_folder

    tok = AutoTokenizer.from_file(family_folder("qwen2.5", tmp_path))
    p = ProcessorFactory.create(kind, tok, strategy=strategy)
    flat = {"query": "hi", "response": "yo"} if kind == "sft" else {"query": "hi", "chosen": "yo", "rejected": "no"}
    rows = [
        flat,
        {**flat, "system": "Be brief."},
        {**flat, "history": [["a", "b"]]},
        {**flat, "tools": '[{"name": "f"}]'},
        {**flat, "system": "", "history": [], "id": 7},  # empty ones and other keys are no loss
    ]
    batch = p.process_batch(rows)
    assert [(i, e.reason, e.field) for i, e in batch.errors] == [
        (1, "uncarried_field", "system"),
        (2, "uncarried_field", "history"),
        (3, "uncarried_field", "tools"),
    ]
    assert batch.rows.tolist() == [0, 4]
    assert "converter='alpaca'" in batch.errors[0][1].message


def test_a_pair_with_a_side_that_trains_nothing_is_nothing_to_train_not_a_prompt_mismatch(trained):
    """Its whole conversation was taken as its prompt, so the pair was skipped as prompt_mismatch,
    whose message tells the user to fix prompts that are the same."""

    def turn(role: str, text: str, weight: float = 1.0) -> dict:
        return {"role": role, "content": [{"type": "text", "value": text}], "loss_weight": weight}

    ask = turn("user", "q", 0.0)
    rows = [
        {
            "chosen_messages": [ask, turn("assistant", "good", 0.0)],
            "rejected_messages": [ask, turn("assistant", "bad")],
        },
        {"chosen_messages": [ask], "rejected_messages": [ask, turn("assistant", "bad")]},
        {
            "chosen_messages": [ask, turn("assistant", "good")],
            "rejected_messages": [turn("user", "other", 0.0), turn("assistant", "bad")],
        },
    ]
    batch = ProcessorFactory.create("dpo", trained).process_batch(rows)
    assert [(i, e.reason) for i, e in batch.errors] == [
        (0, "nothing_to_train"),
        (1, "nothing_to_train"),
        (2, "prompt_mismatch"),
    ]
    assert "train_tool_calls=True" in batch.errors[0][1].message
