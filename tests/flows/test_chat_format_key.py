"""Everything that changes bytes keys the cache: an edited chat template is never served from an old run,
and a strategy the tokenizer cannot honour exits 2 from the CLI before any flow runs."""

from __future__ import annotations

import json

import pytest
from typer.testing import CliRunner

from flows.cache_flow import cache_flow
from flows.cli import app
from flows.params import CacheParams
from pipeline_core import load_h5
from pipeline_core.errors import ConfigError
from tests.pipeline_core.chat.families import family_folder, reference, template_text

ROWS = [{"query": f"What is {i} + {i}?", "response": f"It is {2 * i}."} for i in range(20)]


@pytest.fixture()
def chunk(tmp_path):
    path = tmp_path / "in" / "train_chunk_0.jsonl"
    path.parent.mkdir()
    path.write_text("".join(json.dumps(r) + "\n" for r in ROWS), encoding="utf-8")
    return path


def params(folder, chunk, output, **kw) -> CacheParams:
    return CacheParams(
        input=str(chunk),
        output=str(output),
        tokenizer={"path": str(folder)},
        processor="sft",
        strategy="template",
        **kw,
    )


def set_template(folder, template: str) -> None:
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config["chat_template"] = template
    config_path.write_text(json.dumps(config), encoding="utf-8")


def test_a_changed_template_is_refused_then_rebuilt_with_overwrite(tmp_path, chunk):
    folder = family_folder("qwen2.5", tmp_path / "tok")
    out = tmp_path / "out"
    first = cache_flow(params(folder, chunk, out))
    assert first["cached"] == [False]
    before = load_h5(str(out / "train_chunk_0.h5"))["sequence"][0].tolist()
    edited = template_text("qwen2.5").replace("You are Qwen, created by Alibaba Cloud.", "You are a test model.")
    set_template(folder, edited)
    with pytest.raises(ConfigError, match="other settings"):
        cache_flow(params(folder, chunk, out))
    again = cache_flow(params(folder, chunk, out, overwrite=True))
    assert again["cached"] == [False]
    after = load_h5(str(out / "train_chunk_0.h5"))["sequence"][0].tolist()
    assert after != before
    tok = CacheParams.model_validate(params(folder, chunk, out).model_dump()).build_processor().tokenizer
    assert tok.decode(after).startswith("<|im_start|>system\nYou are a test model.")


@pytest.mark.parametrize("overwrite", [False, True])
def test_a_changed_template_without_trusting_stamps_is_refused_or_rebuilt(tmp_path, chunk, overwrite):
    folder = family_folder("qwen2.5", tmp_path / "tok")
    out = tmp_path / "out"
    untrusted = {"run": {"trust_stamps": False}}
    cache_flow(params(folder, chunk, out, **untrusted))
    set_template(folder, template_text("qwen2.5").replace("You are Qwen, created by Alibaba Cloud.", "Be terse."))
    if not overwrite:
        with pytest.raises(ConfigError, match="other settings"):
            cache_flow(params(folder, chunk, out, **untrusted))
        return
    assert cache_flow(params(folder, chunk, out, overwrite=True, **untrusted))["cached"] == [False]
    messages = [{"role": "user", "content": ROWS[0]["query"]}, {"role": "assistant", "content": ROWS[0]["response"]}]
    expected = reference(folder).apply_chat_template(messages, tokenize=True)["input_ids"]  # the edited template's
    assert load_h5(str(out / "train_chunk_0.h5"))["sequence"][0].tolist() == list(expected)


def test_template_kwargs_markers_and_special_tokens_key_the_cache(tmp_path, chunk):
    from flows.cache_flow import make_job
    from tasks.keys import digest

    folder = family_folder("qwen2.5", tmp_path / "tok")

    def key(strategy="template", **kw) -> str:
        chosen = params(folder, chunk, tmp_path / "o", **kw).model_copy(update={"strategy": strategy})
        return digest(make_job(chosen).settings())

    base, chatml = key(), key("chatml")
    assert key(strategy_kwargs={"chat_template_kwargs": {"enable_thinking": False}}) != base
    assert key("chatml", strategy_kwargs={"user_start": "<|im_start|>human\n"}) != chatml
    config_path = folder / "tokenizer_config.json"
    config = json.loads(config_path.read_text(encoding="utf-8"))
    config_path.write_text(json.dumps({**config, "eos_token": "<|endoftext|>"}), encoding="utf-8")
    assert key() != base and key("chatml") != chatml  # the tokenizer_config's special tokens
    config_path.write_text(json.dumps(config), encoding="utf-8")
    assert (key(), key("chatml")) == (base, chatml)  # and nothing else moved them


def test_a_changed_template_into_a_new_folder_is_a_cache_miss(tmp_path, chunk):
    folder = family_folder("qwen2.5", tmp_path / "tok")
    cache_flow(params(folder, chunk, tmp_path / "a"))
    set_template(folder, template_text("qwen2.5").replace("Alibaba Cloud", "a test"))
    moved = chunk.parent / "copy" / chunk.name
    moved.parent.mkdir()
    moved.write_bytes(chunk.read_bytes())
    assert cache_flow(params(folder, moved, tmp_path / "a2"))["cached"] == [False]


def test_cli_chatml_with_plain_gpt2_exits_2_naming_the_fixes(tmp_path, chunk, gpt2_path, monkeypatch):
    import flows.runs

    monkeypatch.setattr(flows.runs, "run_flow", lambda *a, **k: pytest.fail("the flow must not start"))
    args = ["cache", "--input", str(chunk), "--output", str(tmp_path / "o"), "--tokenizer", str(gpt2_path)]
    result = CliRunner().invoke(
        app, [*args, "--eos-token", "<|endoftext|>", "--processor", "sft", "--strategy", "chatml"]
    )
    assert result.exit_code == 2, result.output
    assert "text_markers=True" in result.output and "<|im_start|>" in result.output
    assert not (tmp_path / "o").exists()


def test_cli_chatml_with_a_qwen_tokenizer_writes_each_marker_as_one_id(tmp_path, chunk):
    folder = family_folder("qwen2.5", tmp_path / "tok")
    args = ["cache", "--input", str(chunk), "--output", str(tmp_path / "o"), "--tokenizer", str(folder)]
    result = CliRunner().invoke(app, [*args, "--processor", "sft", "--strategy", "chatml"])
    assert result.exit_code == 0, result.output
    text = f"<|im_start|>user\n{ROWS[0]['query']}<|im_end|>\n<|im_start|>assistant\n{ROWS[0]['response']}<|im_end|>\n"
    expected = reference(folder)(text, add_special_tokens=False)["input_ids"]  # <|im_start|> is one id there
    assert load_h5(str(tmp_path / "o" / "train_chunk_0.h5"))["sequence"][0].tolist() == expected


def test_the_docs_qwen3_config_runs_from_the_cli(tmp_path):
    """docs/chat-formats.md's Qwen3 example, on GPT-2 with Qwen3's control tokens and template."""
    import yaml

    from pipeline_core import read_attrs

    folder = family_folder("qwen3", tmp_path / "Qwen3")
    data = tmp_path / "data" / "train_chunk_0.jsonl"
    data.parent.mkdir()
    rows = [{"messages": [{"role": "user", "content": [{"type": "text", "value": r["query"]}]},
                          {"role": "assistant", "content": [{"type": "text", "value": r["response"]}]}]}
            for r in ROWS]  # fmt: skip
    data.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    cache = {
        "input": str(data.parent),
        "output": str(tmp_path / "out"),
        "tokenizer": {"path": str(folder)},
        "processor": "sft",
        "strategy": "template",
        "strategy_kwargs": {"rewritten": "last"},
        "pack_size": 512,
        "packing": "bfd",
    }
    config = tmp_path / "qwen3.yaml"
    config.write_text(yaml.safe_dump({"flow": "cache", "cache": cache}), encoding="utf-8")
    thinking_off = "cache.strategy_kwargs.chat_template_kwargs.enable_thinking=false"
    result = CliRunner().invoke(app, ["run", str(config), "--set", thinking_off])
    assert result.exit_code == 0, result.output
    attrs = read_attrs(str(tmp_path / "out" / "train_chunk_0.h5"))
    assert attrs["samples_written"] == len(ROWS)
    assert attrs["strategy_tokens"]["chat_template_kwargs"] == '{"enable_thinking": false}'
