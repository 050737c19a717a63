"""The real templates' masks beyond prefix renders, against transformers: ``{% generation %}`` blocks
against ``return_assistant_tokens_mask``, and dpo pairs (both sides, the last turn trained) against
``apply_chat_template`` and prefix renders; refusals only where transformers' render raises."""

from __future__ import annotations

import pytest

from pipeline_core import AutoTokenizer, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import FAMILY_NAMES, family_folder, reference
from tests.pipeline_core.chat.test_real_templates import Reference, reference_messages
from tests.pipeline_core.processors.test_messages_helpers import fixture_rows


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    return {name: family_folder(name, tmp_path_factory.mktemp(name.replace(".", "_"))) for name in FAMILY_NAMES}


GENERATION_TEMPLATE = (
    "{% for m in messages %}{% if m.role == 'assistant' %}{{ '<|im_start|>assistant\n' }}"
    "{% generation %}{{ m.content }}{% for c in m.tool_calls or [] %}"
    "{{ ('\n' if m.content or not loop.first else '') + '<tool_call>\n' + c.function | tojson + '\n</tool_call>' }}"
    "{% endfor %}"
    "{{ '<|im_end|>\n' }}{% endgeneration %}"
    "{% else %}{{ '<|im_start|>' + m.role + '\n' + m.content + '<|im_end|>\n' }}{% endif %}{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}{% endif %}"
)


@pytest.mark.parametrize("file_name", ["glaive_toolcall_en_demo.json", "v1_sft_demo.jsonl"])
def test_generation_mask_equals_transformers_assistant_mask(tmp_path, llamafactory, file_name):
    folder = family_folder("qwen2.5", tmp_path / "gen", template=GENERATION_TEMPLATE)
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    rows, convert = fixture_rows(llamafactory, file_name)
    rows = rows[:80]
    strategy = StrategyFactory.create("template", tok)
    processor = ProcessorFactory.create_with_strategy("sft", tok, strategy, converter=convert, train_tool_calls=True)
    batch = processor.process_batch(rows)
    assert not batch.errors
    compared = 0
    for j, i in enumerate(batch.rows.tolist()):
        messages, tools, _ = reference_messages(convert(rows[i])["messages"])
        out = ref.apply_chat_template(
            messages, tools=tools, tokenize=True, return_dict=True, return_assistant_tokens_mask=True
        )
        assert batch.samples["sequence"][j].tolist() == list(out["input_ids"])
        # train_tool_calls=True: every assistant turn trains, as every generation block is marked
        if all(m["loss_weight"] > 0 for m in convert(rows[i])["messages"] if m["role"] == "assistant"):
            assert batch.samples["loss_mask"][j].astype(int).tolist() == list(out["assistant_masks"])
            compared += 1
    assert compared == len(rows)


@pytest.mark.parametrize("file_name", ["dpo_en_demo.json", "v1_dpo_demo.jsonl"])
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_real_template_dpo_pairs_match_transformers(folders, llamafactory, family, file_name):
    rows, convert = fixture_rows(llamafactory, file_name)
    rows = rows[:40]
    folder = folders[family]
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    strategy = StrategyFactory.create("template", tok)
    batch = ProcessorFactory.create_with_strategy("dpo", tok, strategy, converter=convert).process_batch(rows)
    errors = dict(batch.errors)
    kept = iter(range(batch.n_samples))
    for i, row in enumerate(rows):
        pair = convert(row)
        sides = {side: Reference(ref, pair[f"{side}_messages"], train_on="last") for side in ("chosen", "rejected")}
        if i in errors:
            assert errors[i].reason == "template_error" and any(r.raises() for r in sides.values()), errors[i]
            continue
        j = next(kept)
        for side, expect in sides.items():
            ids, mask, straddles = expect.expected()
            assert not straddles
            assert batch.samples[side][j].tolist() == ids
            assert batch.samples[f"{side}_mask"][j].tolist() == mask.tolist()
    assert batch.n_samples > 0 or family == "gemma"  # every v1 dpo row has a system message
