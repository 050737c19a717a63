"""Values derived from a tokenizer.json: right, recorded, and trusted by the next process."""

from __future__ import annotations

import hashlib
import json

import pytest

from pipeline_core import AutoTokenizer
from pipeline_core.tokenizer import derived as tokenizer_derived
from tests.pipeline_core.conftest import forget_in_memory
from tests.pipeline_core.tokenizer.test_backends import GPT2, require_fixtures

ROLES = json.dumps({"eos": "<|endoftext|>"}, sort_keys=True)


@pytest.fixture
def gpt2_text(fresh_verdicts) -> str:
    require_fixtures()
    return GPT2.read_text(encoding="utf-8")


def records(fresh_verdicts) -> list:
    return sorted((fresh_verdicts.parent / tokenizer_derived.KIND).glob("*.json"))


def test_gigatoken_copy_drops_only_the_special_added_tokens(gpt2_text):
    config = json.loads(gpt2_text)
    config["added_tokens"].append({**config["added_tokens"][0], "id": 50257, "content": "<|plain|>", "special": False})
    copy = json.loads(tokenizer_derived.gigatoken_json(json.dumps(config)))
    assert [t["content"] for t in copy["added_tokens"]] == ["<|plain|>"]
    assert copy["model"] == config["model"] and copy["pre_tokenizer"] == config["pre_tokenizer"]


def test_fingerprint_is_sha256_of_the_sorted_json_then_the_roles(gpt2_text):
    canonical = json.dumps(json.loads(gpt2_text), sort_keys=True, separators=(",", ":"), ensure_ascii=False)
    expected = hashlib.sha256(canonical.encode("utf-8") + ROLES.encode("utf-8")).hexdigest()
    assert tokenizer_derived.fingerprint(gpt2_text, ROLES) == expected


def test_the_next_process_reads_the_record_and_derives_nothing(gpt2_text, fresh_verdicts, monkeypatch):
    first = tokenizer_derived.gigatoken_json(gpt2_text), tokenizer_derived.fingerprint(gpt2_text, ROLES)
    assert len(records(fresh_verdicts)) == 1

    forget_in_memory()
    monkeypatch.setattr(tokenizer_derived, "without_special_added_tokens", _refuse)
    monkeypatch.setattr(tokenizer_derived, "_canonical", _refuse)
    again = tokenizer_derived.gigatoken_json(gpt2_text), tokenizer_derived.fingerprint(gpt2_text, ROLES)
    assert again == first


def test_new_roles_are_added_to_the_record(gpt2_text, fresh_verdicts):
    eos = tokenizer_derived.fingerprint(gpt2_text, ROLES)
    both = json.dumps({"eos": "<|endoftext|>", "pad": "<|endoftext|>"}, sort_keys=True)
    assert tokenizer_derived.fingerprint(gpt2_text, both) != eos
    record = json.loads(records(fresh_verdicts)[0].read_text())
    assert record["fingerprints"] == {ROLES: eos, both: tokenizer_derived.fingerprint(gpt2_text, both)}


def test_a_torn_older_or_altered_record_is_ignored_and_rewritten(gpt2_text, fresh_verdicts):
    expected = tokenizer_derived.gigatoken_json(gpt2_text)
    (path,) = records(fresh_verdicts)
    good = json.loads(path.read_text())
    altered = {**good, "gigatoken_json": good["gigatoken_json"].replace('"Hello"', '"Hellp"', 1)}
    assert altered["gigatoken_json"] != good["gigatoken_json"]
    for stale in ('{"gigatoken_json": ', json.dumps({**good, "format": 0}), json.dumps(altered)):
        path.write_text(stale)
        forget_in_memory()
        assert tokenizer_derived.gigatoken_json(gpt2_text) == expected
        assert json.loads(path.read_text())["format"] == tokenizer_derived.FORMAT


def test_a_loaded_tokenizer_keeps_its_fingerprint_across_processes(gpt2_text, fresh_verdicts):
    first = AutoTokenizer.from_file(GPT2, eos_token="<|endoftext|>").fingerprint
    forget_in_memory()
    assert AutoTokenizer.from_file(GPT2, eos_token="<|endoftext|>").fingerprint == first


def _refuse(*args, **kwargs):
    raise AssertionError("the record should have been used; a value was derived again")
