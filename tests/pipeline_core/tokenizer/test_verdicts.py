"""Recorded probe verdicts: a later process trusts a matching record and skips the check, nothing else."""

from __future__ import annotations

import json
import warnings

import pytest

from pipeline_core.tokenizer import backends, verdicts
from pipeline_core.tokenizer.backends import create_backend
from tests.pipeline_core.conftest import forget_in_memory
from tests.pipeline_core.tokenizer.test_backends import gpt2_variant, require_fixtures, with_single_word_token

GPT2_TEXT = "Hello world"


def gpt2_json() -> str:
    require_fixtures()
    return gpt2_variant(lambda config: None)


def test_a_passed_check_is_recorded_and_trusted_by_the_next_process(fresh_verdicts, monkeypatch):
    text = gpt2_json()
    first = create_backend(text, "auto")
    assert first.name == "gigatoken" and first.verified
    records = list(fresh_verdicts.glob("*.json"))
    assert len(records) == 1
    record = json.loads(records[0].read_text())
    assert record["reason"] is None and record["gigatoken"] and record["tokenizers"]

    forget_in_memory()  # what a new process sees
    monkeypatch.setattr(backends, "TokenizersBackend", _refuse)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        again = create_backend(text, "gigatoken")
    assert again.verified and again.encode_batch([GPT2_TEXT])[0].tolist() == [15496, 995]


def test_a_failed_check_is_recorded_and_still_warns(fresh_verdicts):
    text = gpt2_variant(with_single_word_token)
    with pytest.warns(UserWarning, match="Hello, world! The quick"):
        assert create_backend(text, "auto").name == "tokenizers"
    forget_in_memory()  # what a new process sees
    with pytest.warns(UserWarning, match="Hello, world! The quick") as caught:
        assert create_backend(text, "auto").name == "tokenizers"
    assert len(caught) == 1
    with pytest.raises(ValueError, match="does not reproduce"):
        create_backend(text, "gigatoken")


def test_any_change_to_the_tokenizer_is_a_new_key(fresh_verdicts):
    text = gpt2_json()
    changed = gpt2_variant(lambda config: config["added_tokens"][0].update(content="<|eot|>"))
    assert verdicts.verdict_key(text) != verdicts.verdict_key(changed)
    create_backend(text, "auto")
    assert verdicts.recall(verdicts.verdict_key(changed)) is verdicts.UNKNOWN


def test_a_new_library_version_is_a_new_key(fresh_verdicts, monkeypatch):
    text = gpt2_json()
    before = verdicts.verdict_key(text)
    real = verdicts._version
    monkeypatch.setattr(verdicts, "_version", lambda p: "99.0" if p == "gigatoken" else real(p))
    assert verdicts.verdict_key(text) != before


def test_a_torn_record_is_ignored_and_rewritten(fresh_verdicts):
    text = gpt2_json()
    key = verdicts.verdict_key(text)
    fresh_verdicts.mkdir(parents=True)
    (fresh_verdicts / f"{key}.json").write_text('{"reason": ')
    assert verdicts.recall(key) is verdicts.UNKNOWN
    assert create_backend(text, "auto").verified
    assert json.loads((fresh_verdicts / f"{key}.json").read_text())["reason"] is None


def test_records_can_be_turned_off(monkeypatch, tmp_path):
    monkeypatch.setenv("H5PIPE_CACHE_DIR", "none")
    monkeypatch.setenv("HOME", str(tmp_path))
    monkeypatch.delenv("XDG_CACHE_HOME", raising=False)
    forget_in_memory()
    assert verdicts.cache_dir() is None
    create_backend(gpt2_json(), "auto")
    assert not any(tmp_path.rglob("*.json"))
    forget_in_memory()


def test_an_unwritable_cache_dir_only_costs_the_check(fresh_verdicts, monkeypatch):
    blocker = fresh_verdicts.parent
    blocker.parent.mkdir(parents=True, exist_ok=True)
    blocker.write_text("a file where the cache folder should be")
    assert create_backend(gpt2_json(), "auto").verified
    assert blocker.is_file()


def _refuse(_json):
    raise AssertionError("the probe check ran although a verdict was recorded")
