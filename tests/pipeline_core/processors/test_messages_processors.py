"""sft/dpo on messages rows: shapes, options, bad rows, weights, media and the over-length policy."""

import json

import numpy as np
import pytest

from pipeline_core import (
    BadRowError,
    ConfigError,
    ProcessorFactory,
    PromptStrategy,
    RowError,
    StrategyFactory,
    TextNormalizer,
    cache_jsonl,
    read_attrs,
)
from pipeline_core.processors.media import decode_media
from tests.pipeline_core.processors.test_messages_helpers import (
    CHATML_ROLES,
    check_weights,
    expected_segments,
    split_text,
)


def msg(role, text, weight=None, kind="text"):
    m = {"role": role, "content": [{"type": kind, "value": text}]}
    if weight is not None:
        m["loss_weight"] = weight
    return m


def conversation(*turns):
    return {"messages": [msg(role, text) for role, text in turns]}


def trained_text(tok, out, seq="sequence", mask="loss_mask"):
    return tok.decode(out[seq][out[mask]].tolist())


TWO_TURNS = conversation(
    ("system", "Be brief."), ("user", "a?"), ("assistant", "A."), ("user", "b?"), ("assistant", "B.")
)


def test_messages_row_renders_system_and_every_assistant_turn(trained):
    out = ProcessorFactory.create("sft", trained).process(TWO_TURNS)
    assert trained_text(trained, out) == "A.<｜im▁end｜>\nB.<｜im▁end｜>\n"
    assert trained.decode(out["sequence"].tolist()) == (
        "<｜im▁start｜>system\nBe brief.<｜im▁end｜>\n<｜im▁start｜>user\na?<｜im▁end｜>\n"
        "<｜im▁start｜>assistant\nA.<｜im▁end｜>\n<｜im▁start｜>user\nb?<｜im▁end｜>\n"
        "<｜im▁start｜>assistant\nB.<｜im▁end｜>\n"
    )
    assert set(out) == {"sequence", "loss_mask"}  # loss_weight is all 0/1: left out


def test_train_on_last_masks_earlier_assistant_turns(trained):
    out = ProcessorFactory.create("sft", trained, train_on="last").process(TWO_TURNS)
    assert trained_text(trained, out) == "B.<｜im▁end｜>\n"
    alpaca = StrategyFactory.create("alpaca", trained)
    out = ProcessorFactory.create("sft", trained, strategy=alpaca, train_on="last").process(TWO_TURNS)
    assert trained.decode(out["sequence"].tolist()) == (
        "Be brief.\n\n### Instruction:\na?\n\n### Response:\nA.<｜end▁of▁sentence｜>"
        "### Instruction:\nb?\n\n### Response:\nB.<｜end▁of▁sentence｜>"
    )
    assert trained_text(trained, out) == "B.<｜end▁of▁sentence｜>"


def test_single_turn_messages_equal_query_response(trained):
    for name in ("chatml", "alpaca"):
        processor = ProcessorFactory.create("sft", trained, strategy=StrategyFactory.create(name, trained))
        rows = [{"query": "q text", "response": "r text"}, conversation(("user", "q text"), ("assistant", "r text"))]
        batch = processor.process_batch(rows)
        assert batch.samples["sequence"][0].tolist() == batch.samples["sequence"][1].tolist()
        s = processor.strategy
        expected = s.assemble_prompt(trained.encode("q text")) + s.assemble_response(trained.encode("r text"))
        assert batch.samples["sequence"][0].tolist() == expected


def test_fractional_loss_weights_are_kept_per_token(trained):
    row = {
        "messages": [msg("user", "u"), msg("assistant", "half", 0.5), msg("user", "v"), msg("assistant", "full", 2.0)]
    }
    processor = ProcessorFactory.create("sft", trained)
    out = processor.process(row)
    weights = out["loss_weight"].numpy()
    assert weights.dtype == np.float32 and sorted(set(weights.tolist())) == [0.0, 0.5, 2.0]
    check_weights(trained, out["sequence"].numpy(), weights, expected_segments(row["messages"], CHATML_ROLES))
    assert processor.deferred_keys == ("loss_weight",) and "loss_weight" in processor.keys


def test_nothing_to_train_is_a_row_error(trained):
    rows = [
        {"messages": [msg("user", "only a question")]},
        {"messages": [msg("user", "q"), msg("assistant", "a", 0.0)]},
        {"messages": [msg("user", "q"), msg("assistant", "a", 1.0), msg("user", "more")]},
    ]
    batch = ProcessorFactory.create("sft", trained).process_batch(rows)
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "nothing_to_train"), (1, "nothing_to_train")]
    assert batch.rows.tolist() == [2]


def test_bad_messages_rows_skip_with_reason_and_field(trained):
    rows = [
        {"messages": [{"role": "user", "content": "not a list"}, msg("assistant", "a")]},
        {"messages": [msg("narrator", "x")]},
        {"messages": []},
        {"text": "neither shape"},
        {"chosen_messages": [msg("user", "q")], "rejected_messages": [msg("user", "q")]},
        conversation(("user", "fine"), ("assistant", "ok")),
    ]
    batch = ProcessorFactory.create("sft", trained).process_batch(rows)
    assert batch.rows.tolist() == [5]
    assert [(i, e.reason, e.field) for i, e in batch.errors] == [
        (0, "wrong_type", "messages[0].content"),
        (1, "unknown_role", "messages[0].role"),
        (2, "empty_conversation", "messages"),
        (3, "missing_field", "messages"),
        (4, "wrong_shape", None),
    ]
    with pytest.raises(RowError, match=r"messages\[0\]\.content must be a list") as err:
        ProcessorFactory.create("sft", trained).process(rows[0])
    assert err.value.field == "messages[0].content"


def test_bad_messages_row_under_raise_names_file_line_and_field(trained, tmp_path):
    path = tmp_path / "chat.jsonl"
    good = conversation(("user", "q"), ("assistant", "a"))
    bad = {"messages": [{"role": "user", "content": "not a list"}]}
    path.write_text("\n".join(json.dumps(r) for r in [good, bad, good]) + "\n", encoding="utf-8")
    with pytest.raises(BadRowError, match=r"chat\.jsonl:2: field 'messages\[0\]\.content'"):
        cache_jsonl(path, tmp_path / "raise", ProcessorFactory.create("sft", trained), on_error="raise")
    [out] = cache_jsonl(path, tmp_path / "skip", ProcessorFactory.create("sft", trained))
    attrs = read_attrs(out)
    assert attrs["samples_written"] == 2 and attrs["skipped_by_reason"] == {"wrong_type": 1}
    assert attrs["train_on"] == "all" and attrs["media"] == "skip"


def test_converter_option_takes_a_name_or_a_callable(trained, llamafactory):
    raw = {"instruction": "Say hi", "input": "", "output": "hi"}
    by_name = ProcessorFactory.create("sft", trained, converter="alpaca").process(raw)
    by_callable = ProcessorFactory.create(
        "sft", trained, converter=lambda r: conversation(("user", r["instruction"]), ("assistant", r["output"]))
    ).process(raw)
    assert by_name["sequence"].tolist() == by_callable["sequence"].tolist()
    assert trained_text(trained, by_name) == "hi<｜im▁end｜>\n"
    described = ProcessorFactory.create("sft", trained, converter="sharegpt").describe()
    assert (described["converter"], described["train_on"], described["media"]) == ("sharegpt", "all", "skip")
    bad = ProcessorFactory.create("sft", trained, converter="alpaca").process_batch([{"instruction": "x"}])
    assert [(e.reason, e.field) for _, e in bad.errors] == [("missing_field", "output")]


@pytest.mark.parametrize(
    "kwargs, match",
    [
        ({"converter": "nope"}, "unknown converter 'nope'"),
        ({"converter": 3}, "converter must be"),
        ({"train_on": "first"}, "train_on must be"),
        ({"media": "drop"}, "media must be"),
    ],
)
def test_bad_options_fail_at_construction(trained, kwargs, match):
    for kind in ("sft", "dpo"):
        with pytest.raises(ConfigError, match=match):
            ProcessorFactory.create(kind, trained, **kwargs)


def test_normalizer_touches_text_not_tool_json(trained):
    call = json.dumps({"name": "f", "arguments": {"q": "\u201cx\u201d"}}, ensure_ascii=False)
    row = {"messages": [msg("user", "\u201chi\u201d"), msg("assistant", call, kind="tool_calls")]}
    out = ProcessorFactory.create("sft", trained, normalizer=TextNormalizer(), train_tool_calls=True).process(row)
    text = trained.decode(out["sequence"].tolist())
    assert '"hi"' in text and call in text


def test_runs_only_strategy_renders_user_assistant_turns(trained):
    class Plain(PromptStrategy):
        def __init__(self, tokenizer):
            super().__init__(tokenizer)
            self.prompt_suffix = self._encode(" => ")
            self.response_suffix = self._encode("\n")

        name = "plain"

        def format_strings(self):
            return {}

    processor = ProcessorFactory.create("sft", trained, strategy=Plain(trained))
    out = processor.process(conversation(("user", "a"), ("assistant", "b"), ("user", "c"), ("assistant", "d")))
    assert trained.decode(out["sequence"].tolist()) == "a => b\nc => d\n"
    assert trained_text(trained, out) == "b\nd\n"
    batch = processor.process_batch(
        [TWO_TURNS, {"messages": [msg("user", "u"), msg("assistant", "{}", kind="tool_calls")]}]
    )
    assert [(e.reason, e.field) for _, e in batch.errors] == [
        ("unsupported_role", "messages[0].role"),
        ("unsupported_content:tool_calls", "messages[1].content[0]"),
    ]


def test_chatml_tool_and_reasoning_blocks(trained):
    row = {
        "messages": [
            {"role": "system", "content": [{"type": "text", "value": "S"}, {"type": "tools", "value": "[]"}]},
            msg("user", "u"),
            {
                "role": "assistant",
                "content": [
                    {"type": "reasoning", "value": "think"},
                    {"type": "text", "value": "calling"},
                    {"type": "tool_calls", "value": '{"name": "f"}'},
                ],
            },
            msg("tool", "42"),
            msg("assistant", "done"),
        ]
    }
    out = ProcessorFactory.create("sft", trained).process(row)
    full, in_text, _ = split_text(expected_segments(row["messages"], CHATML_ROLES))
    assert trained.decode(out["sequence"].tolist()) == full
    assert "<｜im▁start｜>system\nS\n<tools>\n[]\n</tools><｜im▁end｜>\n" in full
    assert "<｜im▁start｜>tool\n42<｜im▁end｜>\n" in full
    assert (
        trained_text(trained, out)
        == in_text
        == (
            '<think>\nthink\n</think>\n\ncalling\n<tool_call>\n{"name": "f"}\n</tool_call><｜im▁end｜>\ndone<｜im▁end｜>\n'
        )
    )


def test_media_keep_stores_references_and_skip_counts_them(trained):
    row = {
        "messages": [
            {"role": "user", "content": [{"type": "image_url", "value": "a.png"}, {"type": "text", "value": "what?"}]},
            msg("assistant", "a cat"),
        ]
    }
    keep = ProcessorFactory.create("sft", trained, media="keep")
    out = keep.process(row)
    assert decode_media(out["media"].numpy()) == [{"type": "image_url", "value": "a.png", "message": 0}]
    assert keep.keys == ["sequence", "loss_mask", "loss_weight", "media"]
    assert decode_media(keep.process(conversation(("user", "q"), ("assistant", "a")))["media"].numpy()) == []
    with pytest.raises(RowError) as err:
        ProcessorFactory.create("sft", trained).process(row)
    assert (err.value.reason, err.value.field) == ("unsupported_content:image_url", "messages[0].content[0]")


# ---- dpo ------------------------------------------------------------------------------------


def pair(prompt, chosen, rejected):
    return {
        "chosen_messages": [msg("user", prompt), msg("assistant", chosen)],
        "rejected_messages": [msg("user", prompt), msg("assistant", rejected)],
    }


def test_dpo_mixed_shapes_in_one_batch(trained):
    processor = ProcessorFactory.create("dpo", trained)
    batch = processor.process_batch([{"query": "q", "chosen": "good", "rejected": "bad"}, pair("q", "good", "bad")])
    for key in ("chosen", "chosen_mask", "rejected", "rejected_mask"):
        assert batch.samples[key][0].tolist() == batch.samples[key][1].tolist()
    assert (
        trained.decode(batch.samples["rejected"][1][batch.samples["rejected_mask"][1]].tolist()) == "bad<｜im▁end｜>\n"
    )
    out = processor.process(pair("q", "good", "bad"))
    assert set(out) == {"chosen", "chosen_mask", "rejected", "rejected_mask"}


def test_dpo_trains_on_the_last_turn_only_by_default(trained):
    history = [msg("user", "h"), msg("assistant", "earlier")]
    row = pair("q", "good", "bad")
    row = {k: [*history, *v] for k, v in row.items()}
    out = ProcessorFactory.create("dpo", trained).process(row)
    assert trained_text(trained, out, "chosen", "chosen_mask") == "good<｜im▁end｜>\n"
    out = ProcessorFactory.create("dpo", trained, train_on="all").process(row)
    assert trained_text(trained, out, "chosen", "chosen_mask") == "earlier<｜im▁end｜>\ngood<｜im▁end｜>\n"


def test_dpo_bad_shapes_and_media(trained):
    image = {"type": "image_url", "value": "a.png"}
    other = pair("q", "a", "b")
    other["rejected_messages"][0]["content"].append({"type": "image_url", "value": "b.png"})
    other["chosen_messages"][0]["content"].append(image)
    same = pair("q", "a", "b")
    for side in ("chosen_messages", "rejected_messages"):
        same[side][0]["content"].append(image)
    processor = ProcessorFactory.create("dpo", trained, media="keep")
    batch = processor.process_batch([conversation(("user", "q"), ("assistant", "a")), other, same])
    assert [(i, e.reason) for i, e in batch.errors] == [(0, "wrong_shape"), (1, "media_mismatch")]
    assert decode_media(batch.samples["media"][0]) == [{"type": "image_url", "value": "a.png", "message": 0}]


# ---- over-length ----------------------------------------------------------------------------


def test_truncate_keeps_the_prompt_and_cuts_the_conversation_end(trained):
    long = conversation(("user", "short question"), ("assistant", "word " * 100), ("user", "again"), ("assistant", "x"))
    prompt_heavy = conversation(("user", "word " * 100), ("assistant", "x"))
    full = ProcessorFactory.create("sft", trained).process(long)["sequence"]
    cut = ProcessorFactory.create("sft", trained, max_length=40, overflow="truncate").process_batch(
        [long, prompt_heavy]
    )
    assert cut.rows.tolist() == [0] and cut.truncated == 1
    assert [(i, e.reason) for i, e in cut.errors] == [(1, "prompt_too_long")]
    for key in ("sequence", "loss_mask", "loss_weight"):
        assert cut.samples[key].lengths.tolist() == [40]
    assert cut.samples["sequence"][0].tolist() == full[:40].tolist()
    drop = ProcessorFactory.create("sft", trained, max_length=40).process_batch([long, prompt_heavy])
    assert drop.n_samples == 0 and [e.reason for _, e in drop.errors] == ["too_long", "too_long"]


def test_dpo_truncation_never_cuts_either_prompt(trained):
    rows = [pair("q", "word " * 60, "no"), pair("word " * 60, "a", "b")]
    batch = ProcessorFactory.create("dpo", trained, max_length=32, overflow="truncate").process_batch(rows)
    assert batch.rows.tolist() == [0] and batch.truncated == 1
    assert [(i, e.reason) for i, e in batch.errors] == [(1, "prompt_too_long")]
    assert batch.samples["chosen"].lengths.tolist() == [32] and batch.samples["chosen_weight"].lengths.tolist() == [32]
    assert batch.samples["rejected"].lengths[0] < 32
