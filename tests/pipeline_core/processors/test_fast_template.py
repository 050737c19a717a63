"""The template strategy's flat-row path (processors/fast_template.py, chat/template_pairs.py).

It must give exactly what the general conversation path gives (rows, errors, every key), and
its ids and masks must equal transformers' (``apply_chat_template`` and prefix-render spans) on
real templates; where it cannot answer (no frame, no segment encoding, another shape) the
batch goes the general way.
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core import AutoTokenizer, ProcessorFactory, StrategyFactory, TextNormalizer
from pipeline_core.chat.template_pairs import pair_batch
from pipeline_core.processors import fast_template
from tests.pipeline_core.chat.families import family_folder, metaspace_tokenizer, reference
from tests.pipeline_core.chat.test_real_templates import Reference
from tests.pipeline_core.processors.test_fast_pairs import BAD_SFT, TEXT, assert_same
from tests.pipeline_core.processors.test_processors import alpaca_rows

FRAMED = ("qwen2.5", "llama3.1", "gemma")
STRADDLE = {"query": "Say it twice.", "response": "\n\nTwice."}  # "\n" + "\n\n": one GPT-2 token over the edge
SPECIAL = {"<|im_end|>", "<|eot_id|>", "<end_of_turn>"}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    names = (*FRAMED, "qwen3")
    return {name: family_folder(name, tmp_path_factory.mktemp(name.replace(".", "_"))) for name in names}


def template_processor(folder, **options):
    tok = AutoTokenizer.from_file(folder)
    return ProcessorFactory.create("sft", tok, strategy=StrategyFactory.create("template", tok), **options)


def v1(row: dict) -> list[dict]:
    return [
        {"role": "user", "content": [{"type": "text", "value": row["query"]}]},
        {"role": "assistant", "content": [{"type": "text", "value": row["response"]}]},
    ]


@pytest.mark.parametrize("family", FRAMED)
def test_flat_rows_equal_transformers(folders, llamafactory, family):
    processor = template_processor(folders[family])
    special = {
        "query": f"Repeat {sorted(SPECIAL & set(processor.tokenizer.special_tokens))[0]} please",
        "response": "No.",
    }
    rows = [*alpaca_rows(llamafactory)[:60], STRADDLE, special]
    rows.insert(20, rows.pop())  # a refused row in the middle of the batch
    batch = fast_template.sft_batch(processor, rows)
    assert batch is not None
    assert processor.strategy.fast_path_stats["jinja"] == 0
    errors, kept, ref = dict(batch.errors), iter(range(batch.n_samples)), reference(folders[family])
    for i, row in enumerate(rows):
        ids, mask, straddles = Reference(ref, v1(row)).expected()
        if i in errors:  # each refusal explained by transformers' own encoding
            assert (errors[i].reason, bool(straddles)) in {("template_mask", True), ("special_token_in_text", False)}
            assert errors[i].reason == "template_mask" or row is special
            continue
        j = next(kept)
        assert batch.samples["sequence"][j].tolist() == ids, f"row {i}"
        assert batch.samples["loss_mask"][j].tolist() == mask.tolist(), f"row {i}"
    assert 20 in errors and (family != "qwen2.5" or len(rows) - 1 in errors)
    assert_same(batch, processor._general_batch(rows))


@pytest.mark.parametrize(
    "options", [{}, {"max_length": 96, "overflow": "truncate"}, {"max_length": 96}, {"media": "keep"}]
)
def test_fast_equals_general(folders, llamafactory, options):
    processor = template_processor(folders["qwen2.5"], normalizer=TextNormalizer(), **options)
    rows = [*alpaca_rows(llamafactory)[:200], STRADDLE]
    fast = processor.process_batch(rows)
    assert processor.strategy.fast_path_stats == {
        "frame": 201,
        "jinja": 0,
        "guard_miss": 0,
        "segments": 201,
        "offsets": 0,
    }
    assert_same(fast, processor._general_batch(rows))


def test_bad_rows_stay_on_the_fast_path_with_the_general_errors(folders, llamafactory):
    processor = template_processor(folders["llama3.1"])
    good = alpaca_rows(llamafactory)[:40]
    rows = [row for pair in zip(good, BAD_SFT * 5) for row in pair]
    fast = fast_template.sft_batch(processor, rows)
    assert fast is not None
    assert fast.rows.tolist() == list(range(0, 80, 2)) and [i for i, _ in fast.errors] == list(range(1, 80, 2))
    assert_same(fast, processor._general_batch(rows))


def test_where_the_pairs_path_does_not_answer(folders, tmp_path):
    row = {"query": "q", "response": "r"}
    qwen3 = template_processor(folders["qwen3"])  # its template asks contents questions: a guarded frame
    assert pair_batch(qwen3.strategy, [("q", "r")]) is not None
    mistral = family_folder("mistral", tmp_path / "mistral", base=metaspace_tokenizer())  # no segment encoding
    assert fast_template.sft_batch(template_processor(mistral), [row]) is None
    qwen = template_processor(folders["qwen2.5"])
    assert pair_batch(qwen.strategy, [("q", "r"), ("q", " \n")]) is None  # a blank content: another shape
    assert fast_template.sft_batch(qwen, [row, {"messages": v1(row)}]) is None  # a good row that is not flat
    tok = qwen.tokenizer
    converted = ProcessorFactory.create("sft", tok, strategy=qwen.strategy, converter="alpaca")
    assert fast_template.sft_batch(converted, [{"instruction": "q", "output": "r"}]) is None


@settings(max_examples=60, deadline=None)
@given(pairs=st.lists(st.tuples(TEXT, TEXT), min_size=1, max_size=8), max_length=st.none() | st.integers(4, 60))
def test_random_rows_match(folders, pairs, max_length):
    processor = template_processor(folders["qwen2.5"], max_length=max_length, overflow="truncate")
    rows = [{"query": q, "response": r} for q, r in pairs]
    assert_same(processor.process_batch(rows), processor._general_batch(rows))
