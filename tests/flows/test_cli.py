"""The h5pipe command line, run in-process against the session's Prefect test server."""

from __future__ import annotations

import json

import yaml
from typer.testing import CliRunner

from flows.cli import app

runner = CliRunner()


def write_config(path, config):
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def cache_config(tmp_path, llamafactory, gpt2_path, **cache):
    return {
        "flow": "cache",
        "cache": {
            "input": str(llamafactory / "c4_demo.jsonl"),
            "output": str(tmp_path / "h5"),
            "tokenizer": {"path": str(gpt2_path), "eos_token": "<|endoftext|>"},
            "processor": "pt",
            **cache,
        },
    }


def test_run_writes_outputs_and_exits_zero(tmp_path, llamafactory, gpt2_path):
    config = write_config(tmp_path / "c.yaml", cache_config(tmp_path, llamafactory, gpt2_path))
    result = runner.invoke(app, ["run", str(config), "--set", "cache.pack_size=256", "--set", "cache.pad_value=0"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert summary["samples_written"] == 300 and summary["packs"] > 0
    assert (tmp_path / "h5" / "c4_demo.h5").exists()
    shown = runner.invoke(app, ["inspect", str(tmp_path / "h5" / "c4_demo.h5"), "--index", "1"])
    assert shown.exit_code == 0, shown.output
    assert "pack_size: 256" in shown.stdout and "pack 1 (sequence, 256 tokens)" in shown.stdout


def test_bad_config_exits_nonzero_naming_the_field(tmp_path, llamafactory, gpt2_path):
    config = write_config(tmp_path / "bad.yaml", cache_config(tmp_path, llamafactory, gpt2_path, pack_size=-4))
    result = runner.invoke(app, ["run", str(config)])
    assert result.exit_code == 2
    assert "cache.pack_size" in result.output or "pack_size" in result.output
    unknown = write_config(tmp_path / "u.yaml", cache_config(tmp_path, llamafactory, gpt2_path, procesor="pt"))
    result = runner.invoke(app, ["run", str(unknown)])
    assert result.exit_code == 2 and "procesor" in result.output


def test_a_key_given_twice_is_refused_not_last_wins(tmp_path, llamafactory, gpt2_path):
    text = yaml.safe_dump(cache_config(tmp_path, llamafactory, gpt2_path, pack_size=512, pad_value=0))
    text = text.replace("  pack_size: 512\n", "  pack_size: 512\n  pack_size: 0\n")
    assert yaml.safe_load(text)["cache"]["pack_size"] == 0  # what PyYAML alone makes of it
    (tmp_path / "twice.yaml").write_text(text, encoding="utf-8")
    result = runner.invoke(app, ["run", str(tmp_path / "twice.yaml")])
    assert result.exit_code == 2 and "'pack_size' is given twice" in result.output
    assert not (tmp_path / "h5").exists()


def test_a_pipeline_refuses_a_cache_input_it_would_not_read(tmp_path, llamafactory, gpt2_path):
    """The pipeline's cache stage reads the export's chunks: another cache.input was ignored."""
    config = {
        "flow": "pipeline",
        "export": {"source": str(llamafactory / "c4_demo.jsonl"), "output": str(tmp_path / "jsonl")},
        "cache": {**cache_config(tmp_path, llamafactory, gpt2_path)["cache"], "input": str(tmp_path / "elsewhere")},
    }
    result = runner.invoke(app, ["run", str(write_config(tmp_path / "p.yaml", config))])
    assert result.exit_code == 2 and "cache.input" in result.output and "export.output" in result.output
    assert not (tmp_path / "jsonl").exists()


def test_failed_run_exits_one(tmp_path, gpt2_path):
    (tmp_path / "in.jsonl").write_text('{"txt": 1}\n')
    args = [
        "cache",
        "--input",
        str(tmp_path / "in.jsonl"),
        "--output",
        str(tmp_path / "o"),
        "--tokenizer",
        str(gpt2_path),
    ]
    result = runner.invoke(app, [*args, "--eos-token", "<|endoftext|>", "--on-error", "raise"])
    assert result.exit_code == 1
    assert "in.jsonl:1: field 'text'" in result.output


def test_every_command_has_help():
    for command in ["export", "cache", "run", "inspect", "sample"]:
        result = runner.invoke(app, [command, "--help"])
        assert result.exit_code == 0 and "Usage" in result.output
