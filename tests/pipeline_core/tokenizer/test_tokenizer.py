import json

import pytest
from tokenizers import Tokenizer

from pipeline_core import AutoTokenizer
from pipeline_core.tokenizer.auto import TRAINED_SPECIAL_TOKENS


def test_gpt2_roles_and_ids_match_tokenizers(gpt2, gpt2_path):
    raw = Tokenizer.from_file(str(gpt2_path))
    text = "Hello world, this is h5pipe.\n  Indented\tcode();"
    assert gpt2.encode(text) == raw.encode(text, add_special_tokens=False).ids
    assert gpt2.eos_token == "<|endoftext|>"
    assert gpt2.eos_token_id == 50256
    assert gpt2.stop_ids == [50256]
    assert gpt2.vocab_size == 50257
    assert gpt2.decode(gpt2.encode(text)) == text


def test_unset_role_is_a_clear_attribute_error(gpt2):
    with pytest.raises(AttributeError, match="no pad_token; pass pad_token="):
        _ = gpt2.pad_token_id
    with pytest.raises(AttributeError, match="no bos_token"):
        _ = gpt2.bos_token
    with pytest.raises(AttributeError, match="pad_token"):
        _ = gpt2.pad_id


def test_role_not_in_vocabulary_names_token_and_roles(gpt2_path):
    with pytest.raises(ValueError) as err:
        AutoTokenizer.from_file(gpt2_path, eos_token="<|nope|>")
    message = str(err.value)
    assert "<|nope|>" in message and "bos_token" in message and "pad_token" in message


def test_special_strings_in_user_text_stay_text(gpt2):
    ids = gpt2.encode("a <|endoftext|> b")
    assert 50256 not in ids
    assert gpt2.decode(ids) == "a <|endoftext|> b"
    assert gpt2.encode_markup("<|endoftext|>") == [50256]


def test_folder_with_tokenizer_config_reads_roles_and_template(tmp_path, gpt2_path):
    (tmp_path / "tokenizer.json").write_bytes(gpt2_path.read_bytes())
    config = {
        "eos_token": {"content": "<|endoftext|>", "special": True},
        "bos_token": "<|endoftext|>",
        "chat_template": "{% for m in messages %}{{ m['content'] }}{{ eos_token }}{% endfor %}",
    }
    (tmp_path / "tokenizer_config.json").write_text(json.dumps(config))
    tok = AutoTokenizer.from_file(tmp_path)
    assert tok.eos_token_id == 50256 and tok.bos_token == "<|endoftext|>"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}], tokenize=False) == "hi<|endoftext|>"
    assert tok.apply_chat_template([{"role": "user", "content": "hi"}]) == [5303, 50256]
    override = AutoTokenizer.from_file(tmp_path / "tokenizer.json", eos_token="<|endoftext|>", bos_token=None)
    assert not override.has_role("bos")


def test_trained_tokenizer_special_tokens_are_single_ids(trained, tmp_path):
    for token in TRAINED_SPECIAL_TOKENS:
        ids = trained.encode_markup(token)
        assert len(ids) == 1 and trained.decode(ids) == token
    assert trained.bos_token == "<｜begin▁of▁sentence｜>"
    assert trained.eos_token == "<｜end▁of▁sentence｜>"
    assert trained.pad_token == "<｜▁pad▁｜>"
    assert trained.pad_id == trained.pad_token_id


def test_trained_tokenizer_save_load_gives_identical_ids(trained, tmp_path, llamafactory):
    trained.save(tmp_path / "tok")
    loaded = AutoTokenizer.from_file(tmp_path / "tok")
    texts = [json.loads(line)["text"] for line in (llamafactory / "c4_demo.jsonl").read_text().splitlines()]
    assert loaded.encode_batch(texts) == trained.encode_batch(texts)
    assert loaded.roles == trained.roles
    assert loaded.fingerprint == trained.fingerprint


def test_train_from_a_file(tmp_path):
    corpus = tmp_path / "corpus.txt"
    corpus.write_text("the quick brown fox jumps over the lazy dog\n" * 50)
    tok = AutoTokenizer.train(str(corpus), vocab_size=400)
    assert tok.decode(tok.encode("the lazy fox")) == "the lazy fox"


def test_fingerprint_changes_with_roles_and_vocab(gpt2_path, trained):
    a = AutoTokenizer.from_file(gpt2_path, eos_token="<|endoftext|>")
    b = AutoTokenizer.from_file(gpt2_path)
    assert a.fingerprint != b.fingerprint
    assert a.fingerprint == AutoTokenizer.from_file(gpt2_path, eos_token="<|endoftext|>").fingerprint
    assert a.fingerprint != trained.fingerprint


def test_chat_template_has_transformers_globals(trained):
    trained.set_chat_template(
        "{% if messages[0]['role'] != 'user' %}{{ raise_exception('first must be user') }}{% endif %}"
        "{{ bos_token }}{% for m in messages %}{{ m['content'] | tojson }}{% endfor %}"
        "{% if add_generation_prompt %}<｜im▁start｜>{% endif %}"
    )
    text = trained.apply_chat_template([{"role": "user", "content": "é"}], add_generation_prompt=True, tokenize=False)
    assert text == '<｜begin▁of▁sentence｜>"é"<｜im▁start｜>'
    ids = trained.apply_chat_template([{"role": "user", "content": "x"}], add_generation_prompt=True)
    assert ids[0] == trained.bos_token_id and ids[-1] == trained.token_to_id("<｜im▁start｜>")
    from jinja2.exceptions import TemplateError

    with pytest.raises(TemplateError, match="first must be user"):
        trained.apply_chat_template([{"role": "assistant", "content": "x"}])


def test_apply_chat_template_without_template_says_how(gpt2):
    with pytest.raises(ValueError, match="set_chat_template"):
        gpt2.apply_chat_template([{"role": "user", "content": "x"}])
