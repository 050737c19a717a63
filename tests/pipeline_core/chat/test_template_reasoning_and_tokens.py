"""What else a chat template reads, given as transformers gives it: a message's reasoning under each
of its names, and the tokenizer's named special tokens beyond bos/eos/pad.

transformers takes an assistant's reasoning from ``reasoning_content``, ``thinking`` or
``reasoning`` (the first not null; ``""`` counts) and passes the template every named special
token of its ``special_tokens_map`` (``unk_token``, ``sep_token``, ``cls_token``, ``mask_token``
too). h5pipe read only ``reasoning_content``, dropped an empty one in the openai converter, and
gave templates bos/eos/pad only: the rows rendered without the reasoning or the token, with no
error. The reference is ``apply_chat_template`` on the raw row.
"""

from __future__ import annotations

import json

import pytest

from tests.pipeline_core.chat.families import family_folder, reference
from tests.pipeline_core.chat.test_template_message_fields import expected_sample, processed

ASK = {"role": "user", "content": "What is 2+2?"}
CASES = {
    "reasoning_content": {"reasoning_content": "Add them."},
    "thinking": {"thinking": "Add them."},
    "reasoning": {"reasoning": "Add them."},
    "empty reasoning_content": {"reasoning_content": ""},
    "two names, one text": {"reasoning_content": "Add them.", "thinking": "Add them."},
}


def openai_row(reasoning: dict) -> dict:
    return {"messages": [ASK, {"role": "assistant", **reasoning, "content": "4"}]}


def v1_row(reasoning: dict) -> dict:
    """The same row in v1 messages (content blocks), with the reasoning at the message level."""
    blocks = lambda text: [{"type": "text", "value": text}]  # noqa: E731
    return {
        "messages": [
            {"role": "user", "content": blocks(ASK["content"])},
            {"role": "assistant", **reasoning, "content": blocks("4")},
        ]
    }


# a template that writes any reasoning it is given, "" too (Qwen3 writes "" as it writes no reasoning
# unless the content holds </think>, a special token in the test tokenizer)
DEFINED = (
    "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}"
    "{%- if m.reasoning_content is defined %}{{- '[' + m.reasoning_content + ']' }}{%- endif %}"
    "{{- m.content + '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def folders(tmp_path_factory):
    return {
        "qwen3": family_folder("qwen3", tmp_path_factory.mktemp("qwen3")),
        "defined": family_folder("qwen2.5", tmp_path_factory.mktemp("defined"), template=DEFINED),
    }


@pytest.fixture(scope="module")
def qwen3(folders):
    return folders["qwen3"]


@pytest.mark.parametrize("case", sorted(CASES))
@pytest.mark.parametrize("converter", ["openai", "messages"])
@pytest.mark.parametrize("template", ["qwen3", "defined"])
def test_reasoning_under_each_name_renders_as_transformers(folders, template, case, converter):
    raw = openai_row(CASES[case])
    ids, mask = expected_sample(reference(folders[template]), raw)
    row = raw if converter == "openai" else v1_row(CASES[case])
    batch = processed(folders[template], [row], converter=converter)
    assert not batch.errors, batch.errors
    assert batch.samples["sequence"][0].tolist() == ids
    assert batch.samples["loss_mask"][0].tolist() == mask


def test_the_reasoning_is_in_the_render(folders):
    """Each case renders otherwise than a row without reasoning: the cases test the reasoning."""
    ref = reference(folders["defined"])
    plain = ref.apply_chat_template(openai_row({})["messages"], tokenize=False)
    for case, reasoning in CASES.items():
        assert ref.apply_chat_template(openai_row(reasoning)["messages"], tokenize=False) != plain, case


@pytest.mark.parametrize("converter", ["openai", "messages"])
def test_two_different_reasonings_are_refused_naming_the_fields(qwen3, converter):
    both = {"reasoning_content": "Add them.", "thinking": "Count."}
    row = openai_row(both) if converter == "openai" else v1_row(both)
    batch = processed(qwen3, [row], converter=converter)
    [(index, error)] = batch.errors
    assert (index, error.reason, error.field) == (0, "conflicting_reasoning", "messages[1].reasoning_content")
    assert "reasoning_content and thinking" in error.message


NAMED = {"sep_token": "<sep>", "unk_token": "<unk>", "cls_token": "<cls>", "mask_token": "<mask>"}
USES_THEM = (
    "{{- cls_token + unk_token }}{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' + m.content }}"
    "{%- if m.role == 'user' %}{{- sep_token }}{%- else %}{{- mask_token }}{%- endif %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)


@pytest.fixture(scope="module")
def named(tmp_path_factory):
    from tokenizers import AddedToken, Tokenizer

    folder = family_folder("qwen2.5", tmp_path_factory.mktemp("named"), template=USES_THEM)
    tok = Tokenizer.from_file(str(folder / "tokenizer.json"))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in NAMED.values()])
    tok.save(str(folder / "tokenizer.json"))
    config = json.loads((folder / "tokenizer_config.json").read_text())
    (folder / "tokenizer_config.json").write_text(json.dumps(config | NAMED))
    return folder


def test_named_special_tokens_reach_the_template_as_from_transformers(named):
    row = openai_row({})
    ref = reference(named)
    text = ref.apply_chat_template(row["messages"], tokenize=False)
    assert all(token in text for token in NAMED.values())  # the reference writes each of them
    ids, mask = expected_sample(ref, row)
    batch = processed(named, [row])
    assert not batch.errors, batch.errors
    assert batch.samples["sequence"][0].tolist() == ids
    assert batch.samples["loss_mask"][0].tolist() == mask


def test_the_named_tokens_key_the_cache(named, qwen3):
    """Outputs rendered before the tokens reached the template are rebuilt, not reused."""
    from pipeline_core import AutoTokenizer, StrategyFactory

    strings = StrategyFactory.create("template", AutoTokenizer.from_file(named)).format_strings()
    assert json.loads(strings["template_tokens"]) == NAMED
    assert "template_tokens" not in StrategyFactory.create("template", AutoTokenizer.from_file(qwen3)).format_strings()
