"""A folder's legacy ``special_tokens_map.json`` is read as transformers reads it.

transformers takes the named tokens of ``special_tokens_map.json`` over ``tokenizer_config.json``'s
when the config has no ``added_tokens_decoder``, and ignores the file when it has one. h5pipe read
only the config: a folder keeping its eos in the map had no eos, and a template's bare
``{{ eos_token }}`` rendered as nothing. The reference is transformers on the same folder.
"""

from __future__ import annotations

import json
import shutil

import pytest

from pipeline_core import AutoTokenizer

TEMPLATE = "{%- for m in messages %}{{ bos_token }}{{- m.content }}{{ eos_token }}{%- endfor %}"
ROLES = ("bos_token", "eos_token", "pad_token", "unk_token")


def folder_with(tmp_path, gpt2_path, config: dict, legacy: dict):
    shutil.copy(gpt2_path, tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text(
        json.dumps({"tokenizer_class": "PreTrainedTokenizerFast", "chat_template": TEMPLATE, **config})
    )
    (tmp_path / "special_tokens_map.json").write_text(json.dumps(legacy))
    return tmp_path


DECODER = {"added_tokens_decoder": {"50256": {"content": "<|endoftext|>", "special": True}}}
CASES = {
    "only in the map": ({}, {"eos_token": "<|endoftext|>", "bos_token": "<|endoftext|>"}),
    "map over config": ({"eos_token": "hello"}, {"eos_token": {"content": "<|endoftext|>", "special": True}}),
    "config with a decoder": ({"eos_token": "<|endoftext|>", **DECODER}, {"eos_token": "hello", "pad_token": "world"}),
}


@pytest.mark.parametrize("case", sorted(CASES))
def test_roles_and_template_tokens_are_transformers(tmp_path, gpt2_path, case):
    from transformers import PreTrainedTokenizerFast

    folder = folder_with(tmp_path, gpt2_path, *CASES[case])
    reference = PreTrainedTokenizerFast.from_pretrained(str(folder))
    ours = AutoTokenizer.from_file(folder)
    assert ours.template_variables() == {k: v for k, v in reference.special_tokens_map.items() if k in ROLES}
    messages = [{"role": "user", "content": "hi"}]
    assert ours.apply_chat_template(messages, tokenize=False) == reference.apply_chat_template(messages, tokenize=False)
    assert ours.eos_token_id == reference.eos_token_id
