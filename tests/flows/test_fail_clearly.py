"""Fail early and clearly (issue 17, defects 10, 11, 12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import pytest
from prefect.settings import PREFECT_API_URL
from typer.testing import CliRunner

import flows.runs
from flows.cache_flow import cache_flow
from flows.cli import app
from flows.export_flow import export_flow
from flows.params import ExportParams
from pipeline_core.commit.sweep import parse_temp
from tests.conftest import ROOT
from tests.flows.test_cache_flow import params

runner = CliRunner()
EOS = "<|endoftext|>"


def write(path, rows):
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


# ---- defect 12: a run that writes nothing fails; failed states keep no pickle ------------------


def test_a_run_that_writes_no_sample_fails_unless_min_samples_allows(gpt2_path, tmp_path):
    (tmp_path / "in").mkdir()
    source = write(tmp_path / "in" / "train_chunk_0.jsonl", [{"body": "no text"}] * 200)
    state = cache_flow(params(gpt2_path, source, tmp_path / "out"), return_state=True)
    assert state.is_failed()
    with pytest.raises(Exception, match=r"(?s)0 samples.*missing_field.*min_samples"):
        state.result()
    assert cache_flow(params(gpt2_path, source, tmp_path / "out0", min_samples=0))["summary"]["samples_written"] == 0


def is_pickle(data: bytes) -> bool:
    """Raw, or base64 as Prefect stores a result record's value."""
    import base64
    import binascii

    try:
        decoded = base64.b64decode(b"".join(data.split()), validate=True)
    except (binascii.Error, ValueError):
        decoded = b""
    return data.startswith(b"\x80") or decoded.startswith(b"\x80")


def test_failed_states_keep_no_pickle(gpt2_path, tmp_path):
    from prefect.settings import PREFECT_LOCAL_STORAGE_PATH

    (tmp_path / "in").mkdir()
    source = write(tmp_path / "in" / "c.jsonl", [{"body": "no text"}] * 5)
    storage = PREFECT_LOCAL_STORAGE_PATH.value()
    before = set(storage.rglob("*")) if storage.exists() else set()
    for name, kw in {"a": {}, "b": {"on_error": "raise"}}.items():  # the flow fails, or a task does
        assert cache_flow(params(gpt2_path, source, tmp_path / name, **kw), return_state=True).is_failed()
    new = [p for p in (set(storage.rglob("*")) if storage.exists() else set()) - before if p.is_file()]
    new += [p for p in tmp_path.rglob("*") if p.is_file() and ".h5pipe" in p.parts]
    assert new  # the failures were recorded somewhere: as JSON
    for path in new:
        data = path.read_bytes()
        assert not is_pickle(data) and b"pickle" not in data.lower(), path


def test_megatron_staging_folders_name_their_writer(tmp_path, gpt2):
    from pipeline_core.formats.keys import KeyLayout
    from pipeline_core.formats.megatron.output import MegatronSink
    from pipeline_core.processors.pt import PretrainProcessor

    sink = MegatronSink(str(tmp_path), "train_chunk_0", KeyLayout.of(PretrainProcessor(gpt2)), gpt2.vocab_size)
    temp = parse_temp(sink.staging)
    assert temp is not None and temp.pid == os.getpid()  # so a rerun sweeps it once this process is gone
    sink.discard()


def test_inspect_a_file_without_samples(gpt2_path, tmp_path):
    (tmp_path / "in").mkdir()
    source = write(tmp_path / "in" / "c.jsonl", [{"body": "no text"}] * 3)
    cache_flow(params(gpt2_path, source, tmp_path / "out", min_samples=0))
    shown = runner.invoke(app, ["inspect", str(tmp_path / "out" / "c.h5"), "--tokenizer", str(gpt2_path)])
    assert shown.exit_code == 0, shown.output
    assert "no samples" in shown.output


# ---- defect 10: a torn manifest and a full disk are exit 1 with a message naming the file ----------


def test_a_torn_manifest_names_the_file(gpt2_path, c4_chunks, tmp_path):
    out = tmp_path / "out"
    cache_flow(params(gpt2_path, c4_chunks, out))
    manifest = out / "h5pipe-manifest.json"
    manifest.write_bytes(manifest.read_bytes()[:100])
    state = cache_flow(params(gpt2_path, c4_chunks, out), return_state=True)
    with pytest.raises(Exception, match=r"h5pipe-manifest.json.*damaged"):
        state.result()
    checked = runner.invoke(app, ["verify", str(out)])
    assert checked.exit_code == 1 and "h5pipe-manifest.json" in checked.output and "Traceback" not in checked.output


@pytest.fixture()
def full_disk(tmp_path):
    """A 300 KiB tmpfs: room for the run's records, not for its HDF5."""
    mount = tmp_path / "tiny"
    mount.mkdir()
    if subprocess.run(["mount", "-t", "tmpfs", "-o", "size=300k", "tmpfs", str(mount)], capture_output=True).returncode:
        pytest.skip("mounting a tmpfs needs root")
    yield mount
    subprocess.run(["umount", str(mount)], check=False)


def test_a_full_disk_is_exit_1_naming_the_file(gpt2_path, llamafactory, full_disk):
    args = ["--input", str(llamafactory / "c4_demo.jsonl"), "--output", str(full_disk / "out")]
    args += ["--tokenizer", str(gpt2_path), "--eos-token", EOS]
    env = {**os.environ, "PREFECT_API_URL": PREFECT_API_URL.value(), "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [sys.executable, "-c", "from flows.cli import main; main()", "cache", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert done.returncode == 1, done.stderr[-2000:]
    assert "No space left" in done.stderr and str(full_disk / "out") in done.stderr


# ---- defect 11: what the config decides is checked before Prefect starts, exit 2, one message ------


@pytest.fixture()
def no_prefect(monkeypatch):
    def started(*a, **k):
        raise AssertionError("Prefect started before the config was checked")

    monkeypatch.setattr(flows.runs, "run_flow", started)


def cache_args(tmp_path, llamafactory, gpt2_path, *extra):
    base = ["cache", "--input", str(llamafactory / "c4_demo.jsonl"), "--output", str(tmp_path / "o")]
    return [*base, "--tokenizer", str(gpt2_path), "--eos-token", EOS, *extra]


@pytest.mark.parametrize(
    "extra, words",
    [
        (["--processor", "sft", "--strategy", "qwen"], "qwen"),
        (
            ["--processor", "dpo", "--pack-size", "256", "--pad-value", "0", "--packing", "concat"]
            + ["--strategy-kwargs", '{"text_markers": true}'],  # GPT-2 has no ChatML control tokens
            "bfd",
        ),
        (["--pack-size", "256"], "pad"),
    ],
)
def test_config_errors_exit_2_before_prefect(tmp_path, llamafactory, gpt2_path, no_prefect, extra, words):
    result = runner.invoke(app, cache_args(tmp_path, llamafactory, gpt2_path, *extra))
    assert result.exit_code == 2, result.output
    assert words in result.output and "Traceback" not in result.output
    assert len(result.output.strip().splitlines()) <= 3


def test_a_missing_tokenizer_exits_2_before_prefect(tmp_path, llamafactory, no_prefect):
    result = runner.invoke(app, cache_args(tmp_path, llamafactory, tmp_path / "nope" / "tokenizer.json"))
    assert result.exit_code == 2 and "nope" in result.output, result.output


def test_the_settings_refusal_exits_2_before_prefect(tmp_path, llamafactory, gpt2_path, no_prefect):
    (tmp_path / "o").mkdir()
    (tmp_path / "o" / "h5pipe-manifest.json").write_text(json.dumps({"stage": "cache", "config_hash": "f" * 64}))
    result = runner.invoke(app, cache_args(tmp_path, llamafactory, gpt2_path))
    assert result.exit_code == 2 and "--overwrite" in result.output, result.output


def test_colliding_inputs_exit_2_before_prefect(tmp_path, gpt2_path, no_prefect):
    for folder in ("a", "b"):
        (tmp_path / folder).mkdir()
        write(tmp_path / folder / "train_chunk_0.jsonl", [{"text": "x"}])
    config = {
        "flow": "cache",
        "cache": {
            "input": [str(tmp_path / "a" / "train_chunk_0.jsonl"), str(tmp_path / "b" / "train_chunk_0.jsonl")],
            "output": str(tmp_path / "o"),
            "tokenizer": {"path": str(gpt2_path), "eos_token": EOS},
        },
    }
    (tmp_path / "c.yaml").write_text(json.dumps(config))
    result = runner.invoke(app, ["run", str(tmp_path / "c.yaml")])
    assert result.exit_code == 2 and "train_chunk_0.h5" in result.output, result.output
    assert not (tmp_path / "o").exists()


def test_export_config_errors_exit_2_before_prefect(tmp_path, llamafactory, no_prefect):
    args = ["export", "--source", str(llamafactory / "c4_demo.jsonl"), "--output", str(tmp_path / "e")]
    result = runner.invoke(app, [*args, "--process-func", "no_such_module:f"])
    assert result.exit_code == 2 and "no_such_module" in result.output, result.output


def test_a_dataset_info_entry_with_kto_tag_exits_2_before_prefect(tmp_path, llamafactory, no_prefect):
    info = tmp_path / "data.yaml"
    entry = {
        "file_name": str(llamafactory / "alpaca_en_demo.json"),
        "columns": {"prompt": "instruction", "kto_tag": "tag"},
    }
    info.write_text(json.dumps({"kto": entry}))  # JSON is YAML
    result = runner.invoke(app, ["export", "--source", str(info), "--output", str(tmp_path / "e")])
    assert result.exit_code == 2 and "kto_tag" in result.output, result.output


def test_export_still_runs(tmp_path, llamafactory):
    out = export_flow(ExportParams(source=str(llamafactory / "c4_demo.jsonl"), output=str(tmp_path / "e")))
    assert out["summary"]["rows_out"] == 300
