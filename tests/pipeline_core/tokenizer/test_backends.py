"""Encode backends: gigatoken must give the ids of the `tokenizers` reference, or not be used."""

from __future__ import annotations

import json
import pickle
import warnings

import awkward as ak
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from tokenizers import Tokenizer

from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer import verdicts
from pipeline_core.tokenizer.auto import TRAINED_SPECIAL_TOKENS, AutoTokenizer
from pipeline_core.tokenizer.backends import TokenizersBackend, create_backend
from pipeline_core.tokenizer.gigatoken import SMALL_BATCH_CHARS, GigatokenBackend, ragged_from_awkward
from pipeline_core.tokenizer.probe import BUILTIN_PROBES, Mismatch, preview, probe_texts, verify_backend
from tests.pipeline_core.tokenizer.backend_corpora import CORPORA, GPT2, assert_same, corpus_strings, require_fixtures

BACKEND_CHOICES = ("auto", "gigatoken", "tokenizers")
SURROGATE_REPLACED = "\ud800".encode("utf-8", "surrogatepass").decode("utf-8", "replace")


@pytest.fixture(scope="module")
def pair(tokenizer_json) -> tuple[TokenizersBackend, GigatokenBackend]:
    return TokenizersBackend(tokenizer_json), GigatokenBackend(tokenizer_json)


@pytest.fixture(scope="module")
def gpt2_by_backend() -> dict[str, AutoTokenizer]:
    """GPT-2 loaded once per backend choice; loading must not warn."""
    require_fixtures()
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        return {b: AutoTokenizer.from_file(GPT2, backend=b, eos_token="<|endoftext|>") for b in BACKEND_CHOICES}


def gpt2_variant(change) -> str:
    config = json.loads(GPT2.read_text(encoding="utf-8"))
    change(config)
    return json.dumps(config)


def with_single_word_token(config: dict) -> None:
    """`tokenizers` honours single_word (no match inside "Hello"); gigatoken splits it anyway."""
    config["added_tokens"].append(
        {
            "id": 50257,
            "content": "ll",
            "single_word": True,
            "lstrip": False,
            "rstrip": False,
            "normalized": False,
            "special": False,
        }
    )


def with_lowercase_normalizer(config: dict) -> None:
    config["normalizer"] = {"type": "Lowercase"}  # valid for `tokenizers`, not loadable by gigatoken


# ---- same ids -----------------------------------------------------------------------------
def test_probe_set_covers_the_hard_cases(tokenizer_json):
    probes = probe_texts(tokenizer_json)
    specials = [t["content"] for t in json.loads(tokenizer_json)["added_tokens"] if t["special"]]
    assert "" in probes and any(SURROGATE_REPLACED in p for p in probes)
    assert all(any(s in p and p != s for p in probes) for s in specials)
    assert max(map(len, probes)) >= 100_000


def test_probe_set_gives_identical_ids(pair, tokenizer_json):
    reference, gigatoken = pair
    assert verify_backend(gigatoken, reference, probe_texts(tokenizer_json)) is None


@pytest.mark.parametrize("corpus", list(CORPORA))
def test_fixture_corpora_give_identical_ids(pair, corpus):
    reference, gigatoken = pair
    texts = corpus_strings(corpus)
    assert len(texts) > 100
    assert_same(gigatoken.encode_batch(texts), reference.encode_batch(texts))


def test_small_and_large_batches_give_identical_ids(pair, tokenizer_json):
    """Batches under SMALL_BATCH_CHARS come from gigatoken as lists, larger ones as awkward rows;
    both give raw `tokenizers`' ids, row by row."""
    reference, gigatoken = pair
    raw = Tokenizer.from_str(tokenizer_json)
    raw.encode_special_tokens = True
    texts = corpus_strings("c4_demo.jsonl")
    batches, batch = [], []
    for text in texts:  # batches just under the limit, then ones of one text each
        if batch and sum(map(len, batch)) + len(text) >= SMALL_BATCH_CHARS:
            batches.append(batch)
            batch = []
        batch.append(text[: SMALL_BATCH_CHARS - 1])
    batches += [[t] for t in texts[:20]] + [["", "é 中文 🙂", ""], [], texts]
    sizes = [sum(map(len, b)) for b in batches]
    assert sum(s < SMALL_BATCH_CHARS for s in sizes) > 20 and max(sizes) >= SMALL_BATCH_CHARS
    for batch in batches:
        ours, theirs = gigatoken.encode_batch(batch), reference.encode_batch(batch)
        assert_same(ours, theirs)
        assert ours.to_lists() == [e.ids for e in raw.encode_batch(batch, add_special_tokens=False)]
        assert ours.values.dtype == np.int32 and ours.offsets.dtype == np.int64


def test_document_split_across_threads_gives_identical_ids():
    """gigatoken cuts a document over 2 MiB into fragments encoded in parallel."""
    require_fixtures()
    tokenizer_json = GPT2.read_text(encoding="utf-8")
    parts = ("c4_demo.jsonl", "alpaca_en_demo.json", "dpo_en_demo.json")
    document = "\n\n".join(s for name in parts for s in corpus_strings(name))[:2_300_000]
    assert len(document.encode("utf-8")) > 2 * 2**20
    texts = ["short one", document, ""]
    assert_same(
        GigatokenBackend(tokenizer_json).encode_batch(texts), TokenizersBackend(tokenizer_json).encode_batch(texts)
    )


def test_a_recorded_verdict_defers_gigatoken_until_the_first_encode(tokenizer_json, fresh_verdicts, monkeypatch):
    """A process that never encodes (a fully cached rerun) does not parse tokenizer.json with gigatoken."""
    import pipeline_core.tokenizer.gigatoken as module

    loads = []
    real_load = module.load_gigatoken
    monkeypatch.setattr(module, "load_gigatoken", lambda text: loads.append(1) or real_load(text))
    create_backend(tokenizer_json, "auto")  # no verdict yet: loaded at once, probed, recorded
    assert len(loads) == 1
    backend = create_backend(tokenizer_json, "auto")
    assert backend.name == "gigatoken" and backend.verified and len(loads) == 1
    texts = corpus_strings("c4_demo.jsonl")[:50]
    assert_same(backend.encode_batch(texts), TokenizersBackend(tokenizer_json).encode_batch(texts))
    backend.encode_batch(texts)
    assert len(loads) == 2  # once, at the first encode


def test_gigatoken_tokenizer_survives_pickling(gpt2_by_backend):
    tok = gpt2_by_backend["gigatoken"]
    copy = pickle.loads(pickle.dumps(tok))
    assert copy.backend_name == "gigatoken" and copy._backend.verified
    assert copy.encode("Hello world<|endoftext|>") == tok.encode("Hello world<|endoftext|>")


# ---- special-token strings are text ------------------------------------------------------
@pytest.mark.parametrize("backend", ["tokenizers", "gigatoken"])
def test_gpt2_special_string_encodes_as_text(gpt2_by_backend, backend):
    tok = gpt2_by_backend[backend]
    text = "end of doc<|endoftext|>start of the next"
    ids = tok.encode(text)
    assert tok.eos_token_id not in ids
    assert tok.decode(ids) == text
    assert ids == tok.encode("end of doc<|") + tok.encode("endoftext") + tok.encode("|>start of the next")
    assert tok.eos_token_id in tok.encode_markup(text)


@pytest.mark.parametrize("backend", ["tokenizers", "gigatoken"])
def test_trained_special_strings_encode_as_text(trained_dir, backend):
    tok = AutoTokenizer.from_file(trained_dir, backend=backend)
    special_ids = {tok.token_to_id(s) for s in TRAINED_SPECIAL_TOKENS}
    for special in TRAINED_SPECIAL_TOKENS:
        text = f"user said {special} twice{special}"
        ids = tok.encode(text)
        assert not special_ids & set(ids)
        assert tok.decode(ids) == text
        assert tok.token_to_id(special) in tok.encode_markup(text)


# ---- choosing a backend -------------------------------------------------------------------
@pytest.mark.parametrize(
    "backend, expected", [("auto", "gigatoken"), ("gigatoken", "gigatoken"), ("tokenizers", "tokenizers")]
)
def test_forcing_each_backend(gpt2_by_backend, backend, expected):
    tok = gpt2_by_backend[backend]
    assert tok.backend_name == expected
    assert tok._backend.verified
    assert tok.encode("Hello world") == [15496, 995]


def test_trained_tokenizer_gets_verified_gigatoken(trained_dir):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tok = AutoTokenizer.from_file(trained_dir)
    assert tok.backend_name == "gigatoken" and tok._backend.verified


def test_auto_falls_back_with_one_warning_naming_the_text(fresh_verdicts):
    require_fixtures()
    tokenizer_json = gpt2_variant(with_single_word_token)
    with pytest.warns(UserWarning) as caught:
        backend = create_backend(tokenizer_json, "auto")
    assert len(caught) == 1
    message = str(caught[0].message)
    assert "Hello, world! The quick" in message and "tokenizers backend" in message
    assert backend.name == "tokenizers" and backend.fallback_reason
    assert backend.encode_batch(["Hello"])[0].tolist() == [15496]


def test_forced_gigatoken_that_mismatches_raises(fresh_verdicts):
    require_fixtures()
    with pytest.raises(ValueError, match="does not reproduce.*backend='tokenizers'"):
        create_backend(gpt2_variant(with_single_word_token), "gigatoken")


def test_auto_falls_back_when_gigatoken_cannot_load(fresh_verdicts):
    require_fixtures()
    with pytest.warns(UserWarning, match="cannot load.*Lowercase") as caught:
        backend = create_backend(gpt2_variant(with_lowercase_normalizer), "auto")
    assert len(caught) == 1
    assert backend.name == "tokenizers"
    assert backend.encode_batch(["HELLO"])[0].tolist() == backend.encode_batch(["hello"])[0].tolist()


def test_forced_gigatoken_that_cannot_load_raises(fresh_verdicts):
    require_fixtures()
    with pytest.raises(ValueError, match="cannot load.*Lowercase.*backend='tokenizers'"):
        create_backend(gpt2_variant(with_lowercase_normalizer), "gigatoken")


def test_verdict_is_memoised_and_still_warns_once_per_load(fresh_verdicts):
    require_fixtures()
    tokenizer_json = gpt2_variant(with_single_word_token)
    for _ in range(2):
        with pytest.warns(UserWarning, match="Hello, world! The quick") as caught:
            assert create_backend(tokenizer_json, "auto").name == "tokenizers"
        assert len(caught) == 1
    assert verdicts.recall(verdicts.verdict_key(tokenizer_json)) == caught[0].message.args[0].split("; using")[0]
    with pytest.raises(ValueError, match="does not reproduce.*backend='tokenizers'"):
        create_backend(tokenizer_json, "gigatoken")


def test_unknown_backend_lists_the_choices():
    with pytest.raises(ValueError, match="'auto', 'tokenizers', 'gigatoken'"):
        create_backend("{}", "fast")


# ---- pieces -------------------------------------------------------------------------------
class _Fixed:
    """A backend that returns given ids, to test the checker alone."""

    def __init__(self, name: str, rows: list[list[int]]) -> None:
        self.name, self._rows = name, rows

    def encode_batch(self, texts: list[str]) -> Ragged:
        return Ragged.from_lists(self._rows[: len(texts)])


def test_verify_backend_reports_the_first_differing_text():
    probes = ["same", "differs", "also differs"]
    reference = _Fixed("ref", [[1], [2, 3, 4], [5]])
    candidate = _Fixed("cand", [[1], [2, 9, 4], [6]])
    mismatch = verify_backend(candidate, reference, probes)
    assert mismatch == Mismatch(1, "differs", [2, 3, 4], [2, 9, 4])
    assert mismatch.first_difference == 1
    assert verify_backend(reference, reference, probes) is None


def test_mismatch_description_truncates_long_text():
    mismatch = Mismatch(3, "x" * 10_000, [1, 2], [1])
    text = mismatch.describe(limit=40)
    assert preview("x" * 10_000, 40) in text and len(preview("x" * 10_000, 40)) == 40
    assert "token 1" in text and "#3" in text


def test_builtin_probes_hold_the_listed_cases():
    joined = "".join(BUILTIN_PROBES)
    for needle in (
        "\t",
        "  " * 20,
        "日本語",
        "\u200d",
        "\u0301",
        "שלום",
        "مرحبا",
        SURROGATE_REPLACED,
        "12345",
        "a" * 1000,
    ):
        assert needle in joined


rows_strategy = st.lists(st.lists(st.integers(0, 2**31 - 1), max_size=6), max_size=12)


@settings(max_examples=50, deadline=None)
@given(rows=rows_strategy, start=st.integers(0, 3))
def test_ragged_from_awkward_matches_rows(rows, start):
    array = ak.Array([np.asarray(r, dtype=np.uint32) for r in rows] or ak.Array(np.zeros((0, 0), np.uint32)))
    sliced = array[start:]  # offsets no longer start at 0
    ragged = ragged_from_awkward(sliced)
    assert ragged.values.dtype == np.int32 and ragged.offsets[0] == 0
    assert ragged.to_lists() == rows[start:]


@settings(max_examples=50, deadline=None)
@given(rows=rows_strategy.filter(len))
def test_ragged_from_awkward_handles_reordered_layouts(rows):
    array = ak.Array([np.asarray(r, dtype=np.uint32) for r in rows])
    order = np.arange(len(rows))[::-1]
    assert ragged_from_awkward(array[order]).to_lists() == [rows[i] for i in order]


def with_overlapping_tokens(config: dict) -> None:
    """A special <|im_start|> whose end runs into a non-special |>assistant: `tokenizers` lets the
    special match (encoded as text) hide the other token; gigatoken, given no special tokens, matched it."""
    for k, (content, special) in enumerate([("<|im_start|>", True), ("|>assistant", False)]):
        config["added_tokens"].append(
            {
                "id": 50257 + k,
                "content": content,
                "single_word": False,
                "lstrip": False,
                "rstrip": False,
                "normalized": False,
                "special": special,
            }
        )


def test_tokens_running_into_each_other_are_probed(fresh_verdicts):
    require_fixtures()
    tokenizer_json = gpt2_variant(with_overlapping_tokens)
    reference = Tokenizer.from_str(tokenizer_json)
    reference.encode_special_tokens = True
    text = "<|im_start|>assistant\nHi"
    with pytest.warns(UserWarning, match="im_start"):
        backend = create_backend(tokenizer_json, "auto")
    assert backend.encode_batch([text])[0].tolist() == reference.encode(text, add_special_tokens=False).ids
