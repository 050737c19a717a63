"""The CLI is generated from the pydantic models: every field is a flag, flags set exactly the
fields the YAML would, a field added to a model is a flag with no CLI change, and the CLI-only
--dry-run, --limit and --version do what they say."""

from __future__ import annotations

import json
import re

import pytest
import typer
from pydantic import BaseModel, Field, SecretStr
from typer.testing import CliRunner

from flows.cli import app
from flows.cli_options import model_command
from flows.params import CacheParams, ExportParams

runner = CliRunner()
WIDE = {"COLUMNS": "400", "TERM": "dumb", "NO_COLOR": "1"}


def leaf_fields(model: type[BaseModel], prefix=()) -> dict[tuple[str, ...], object]:
    """Every non-secret field of ``model``, nested models walked, by path."""
    out = {}
    for name, field in model.model_fields.items():
        nested = [a for a in getattr(field.annotation, "__args__", (field.annotation,)) if isinstance(a, type)]
        model_type = next((a for a in nested if issubclass(a, BaseModel)), None)
        if model_type is not None:
            out.update(leaf_fields(model_type, (*prefix, name)))
        elif SecretStr not in nested:
            out[(*prefix, name)] = field
    return out


def help_flags(command: str) -> set[str]:
    result = runner.invoke(app, [command, "--help"], env=WIDE)
    assert result.exit_code == 0, result.output
    return set(re.findall(r"(?<![\w-])--(?!no-)([a-z][a-z0-9-]*)", result.output)) - {"help", "dry-run"}


@pytest.mark.parametrize(("command", "model"), [("cache", CacheParams), ("export", ExportParams)])
def test_help_lists_every_field_and_nothing_else(command, model):
    fields = leaf_fields(model)
    listed = help_flags(command)
    expected = set()
    for path in fields:
        # a nested model's `path` is named after the model; other nested fields by their own name
        name = path[-2] if path[-1] == "path" and len(path) > 1 else path[-1]
        expected.add(name.replace("_", "-"))
    aliases = {"dataset", "normalize"}
    assert listed - aliases == expected
    assert len(expected) == len(fields)  # no two fields share a flag


def captured_command(model):
    seen = {}

    def capture(data: dict) -> None:
        seen["data"] = data

    cli = typer.Typer()
    cli.command()(model_command(model, capture, [], "doc"))
    return cli, seen


def test_flags_set_the_fields_the_yaml_sets():
    cli, seen = captured_command(CacheParams)
    args = "--input a.jsonl --input b.jsonl --output out --tokenizer tok --eos-token </s> --pack-size 256"
    args += " --normalize --no-split-sentences --max-workers 3 --endpoint-url http://s3 --no-trust-stamps"
    args += " --max-error-rate 0.5 --limit 2"
    result = runner.invoke(cli, [*args.split(), "--processor-kwargs", '{"train_on": "last"}'])
    assert result.exit_code == 0, result.output
    assert seen["data"] == {
        "input": ["a.jsonl", "b.jsonl"],
        "output": "out",
        "tokenizer": {"path": "tok", "eos_token": "</s>"},
        "pack_size": "256",
        "normalizer": True,
        "split_sentences": False,
        "processor_kwargs": {"train_on": "last"},
        "max_error_rate": "0.5",
        "limit": "2",
        "run": {"max_workers": "3", "trust_stamps": False, "storage": {"endpoint_url": "http://s3"}},
    }
    params = CacheParams.model_validate(seen["data"])  # the model does the typing and the checks
    assert (params.pack_size, params.run.max_workers, params.max_error_rate) == (256, 3, 0.5)
    bad = runner.invoke(cli, ["--output", "o", "--tokenizer", "t", "--processor-kwargs", "{oops"])
    assert bad.exit_code != 0 and "takes a JSON object" in bad.output


def test_a_field_added_to_a_model_is_a_flag_without_touching_the_cli():
    class Grown(CacheParams):
        brand_new_knob: int = Field(5, description="added by another issue")

    cli, seen = captured_command(Grown)
    help_text = runner.invoke(cli, ["--help"], env=WIDE).output
    assert "--brand-new-knob" in help_text and "added by another issue (default: 5)" in help_text
    runner.invoke(cli, ["--output", "o", "--tokenizer", "t", "--brand-new-knob", "7"])
    assert seen["data"]["brand_new_knob"] == "7"


def test_datasets_split_on_commas():
    cli, seen = captured_command(ExportParams)
    result = runner.invoke(cli, ["--source", "s", "--output", "o", "--dataset", "a,b", "--dataset", "c"])
    assert result.exit_code == 0, result.output
    assert seen["data"]["datasets"] == ["a", "b", "c"]
    assert ExportParams.model_validate({"source": "s", "output": "o", "datasets": "x, y"}).datasets == ["x", "y"]


def test_version():
    result = runner.invoke(app, ["--version"])
    assert result.exit_code == 0 and re.match(r"h5pipe \S+ \(HDF5 format \d+\)", result.output)


def test_export_selects_dataset_info_entries_and_dry_run_writes_nothing(llamafactory, tmp_path):
    entries = json.loads((llamafactory / "dataset_info.json").read_text())
    entries = {k: {**v, "file_name": str(llamafactory / v["file_name"])} for k, v in entries.items()}
    entries["deepctrl"] = {"ms_hub_url": "deepctrl/deepctrl-sft-data"}  # as in LLaMA-Factory's full file
    info = tmp_path / "dataset_info.json"
    info.write_text(json.dumps(entries))
    args = ["export", "--source", str(info), "--dataset", "identity,c4_demo", "--chunk-size", "100"]
    plan = runner.invoke(app, [*args, "--output", str(tmp_path / "dry"), "--dry-run"])
    assert plan.exit_code == 0, plan.output
    shown = json.loads(plan.stdout[plan.stdout.index("{") :])
    assert (shown["rows"], shown["chunks"], shown["cached"], shown["to_do"]) == (391, 4, 0, 4)
    assert not (tmp_path / "dry").exists()
    result = runner.invoke(app, [*args, "--output", str(tmp_path / "out"), "--limit", "150"])
    assert result.exit_code == 0, result.output
    summary = json.loads(result.stdout[result.stdout.index("{") :])
    assert "ModelScope" in summary["datasets_not_loadable"]["deepctrl"]  # listed, not fatal
    rows = [json.loads(line) for f in sorted((tmp_path / "out").glob("*.jsonl")) for line in f.open()]
    assert len(rows) == 150 and {r["_source"] for r in rows} <= {"identity", "c4_demo"}
    again = runner.invoke(app, [*args, "--output", str(tmp_path / "out"), "--limit", "150", "--dry-run"])
    assert json.loads(again.stdout[again.stdout.index("{") :])["to_do"] == 0  # all current in the manifest


def test_cache_dry_run_plans_from_the_manifest(c4_chunks, gpt2_path, tmp_path):
    args = ["cache", "--input", str(tmp_path / "in"), "--tokenizer", str(gpt2_path), "--eos-token", "<|endoftext|>"]
    out = ["--output", str(tmp_path / "h5")]
    plan = runner.invoke(app, [*args, *out, "--dry-run"])
    assert plan.exit_code == 0, plan.output
    assert json.loads(plan.stdout[plan.stdout.index("{") :])["to_do"] == 3 and not (tmp_path / "h5").exists()
    assert runner.invoke(app, [*args, *out, "--limit", "2"]).exit_code == 0
    again = runner.invoke(app, [*args, *out, "--dry-run"]).stdout
    after = json.loads(again[again.index("{") :])
    assert (after["chunks"], after["cached"], after["to_do"]) == (3, 2, 1)


def test_megatron_outputs_from_the_cli_merge_with_the_cli(c4_chunks, gpt2_path, tmp_path):
    from tests.pipeline_core.stages.test_megatron_names import mindspeed_read, read

    args = ["cache", "--input", str(tmp_path / "in"), "--tokenizer", str(gpt2_path), "--eos-token", "<|endoftext|>"]
    result = runner.invoke(
        app, [*args, "--output", str(tmp_path / "m"), "--output-format", "megatron", "--json-keys", "text"]
    )
    assert result.exit_code == 0, result.output
    assert sorted(p.name for p in (tmp_path / "m").glob("*.idx")) == [
        f"train_chunk_{i}_text_document.idx" for i in range(3)
    ]
    merged = runner.invoke(app, ["merge", "--input", str(tmp_path / "m"), "--output", str(tmp_path / "all" / "c4")])
    assert merged.exit_code == 0, merged.output
    seqs, documents, _ = read(tmp_path / "all" / "c4_text_document")
    assert len(seqs) == 300 and documents == list(range(301))
    (tmp_path / "sft").mkdir()
    (tmp_path / "sft" / "a.jsonl").write_text(
        "".join(json.dumps({"query": f"q {i}", "response": f"a {i}"}) + "\n" for i in range(20))
    )
    sft = ["cache", "--input", str(tmp_path / "sft"), "--tokenizer", str(gpt2_path), "--processor", "sft"]
    sft += ["--strategy-kwargs", '{"text_markers": true}']  # GPT-2 has no ChatML control tokens
    result = runner.invoke(
        app, [*sft, "--output", str(tmp_path / "ms"), "--output-format", "mindspeed", "--pad-token", "<|endoftext|>"]
    )
    assert result.exit_code == 0, result.output
    assert len(mindspeed_read(str(tmp_path / "ms" / "a"))) == 20
    bad = runner.invoke(app, [*sft, "--output", str(tmp_path / "x"), "--json-keys", "a,b"])
    assert bad.exit_code == 2 and "json_keys" in bad.output
