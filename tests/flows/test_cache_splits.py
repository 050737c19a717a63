"""The cache flow's val_size and shuffle, from the CLI as users run them: OUTPUT/train and
OUTPUT/validation, each a committed output, identical across runs with one seed, disjoint, and
together exactly the unsplit output; --shuffle a seeded permutation of it."""

from __future__ import annotations

import json
from collections import Counter

from typer.testing import CliRunner

from flows.cli import app
from pipeline_core import H5Dataset
from pipeline_core.commit.manifest import Manifest, load_manifest, save_manifest
from pipeline_core.commit.verify import verify_output

runner = CliRunner()


def invoke(gpt2_path, tmp_path, out: str, *extra: str):
    args = ["cache", "--input", str(tmp_path / "in"), "--output", str(tmp_path / out), "--tokenizer", str(gpt2_path)]
    return runner.invoke(app, [*args, "--eos-token", "<|endoftext|>", *extra])


def cache(gpt2_path, tmp_path, out: str, *extra: str) -> None:
    result = invoke(gpt2_path, tmp_path, out, *extra)
    assert result.exit_code == 0, result.output


def samples(folder) -> list[tuple[int, ...]]:
    return [tuple(item["sequence"].tolist()) for item in H5Dataset(folder)]


def test_val_size_splits_deterministically_and_completely(c4_chunks, gpt2_path, tmp_path):
    cache(gpt2_path, tmp_path, "whole")
    cache(gpt2_path, tmp_path, "a", "--val-size", "0.1", "--seed", "7")
    cache(gpt2_path, tmp_path, "b", "--val-size", "0.1", "--seed", "7")
    whole = samples(tmp_path / "whole")
    train, val = samples(tmp_path / "a" / "train"), samples(tmp_path / "a" / "validation")
    assert (samples(tmp_path / "b" / "train"), samples(tmp_path / "b" / "validation")) == (train, val)
    assert len(val) == 30 and Counter(train) + Counter(val) == Counter(whole)  # the union, nothing twice
    assert not set(train) & set(val)
    for split in ("train", "validation"):
        assert verify_output(str(tmp_path / "a" / split)).ok  # each split committed in its manifest
    record = json.loads((tmp_path / "a" / "h5pipe-splits.json").read_text())
    assert record["splits"]["validation"]["rows"] == 30 and record["splits"]["train"]["samples"] == 270
    assert record["splits"]["train"]["manifest"] == "train/h5pipe-manifest.json"
    blank = sum(1 for p in (tmp_path / "in").glob("*.jsonl") for line in p.read_text().splitlines() if not line.strip())
    assert record["blank_lines_left_out"] == blank


def test_shuffle_is_a_seeded_permutation_of_the_output(c4_chunks, gpt2_path, tmp_path):
    cache(gpt2_path, tmp_path, "whole")
    cache(gpt2_path, tmp_path, "s1", "--shuffle", "--seed", "7", "--shuffle-bucket-bytes", "200000")
    cache(gpt2_path, tmp_path, "s2", "--shuffle", "--seed", "7", "--shuffle-bucket-bytes", "200000")
    cache(gpt2_path, tmp_path, "s3", "--shuffle", "--seed", "8", "--shuffle-bucket-bytes", "200000")
    whole, first = samples(tmp_path / "whole"), samples(tmp_path / "s1" / "train")
    assert Counter(first) == Counter(whole) and first != whole
    assert samples(tmp_path / "s2" / "train") == first and samples(tmp_path / "s3" / "train") != first
    assert len(list((tmp_path / "s1" / "train").glob("*.h5"))) > 1  # several buckets, each one chunk


def test_dry_run_shows_the_split_and_writes_nothing(c4_chunks, gpt2_path, tmp_path):
    args = ["cache", "--input", str(tmp_path / "in"), "--output", str(tmp_path / "o"), "--tokenizer", str(gpt2_path)]
    result = runner.invoke(app, [*args, "--eos-token", "<|endoftext|>", "--val-size", "25", "--dry-run"])
    assert result.exit_code == 0, result.output
    plan = json.loads(result.stdout[result.stdout.index("{") :])
    assert plan["splits"] == {"train": 275, "validation": 25} and not (tmp_path / "o").exists()


def refused(gpt2_path, tmp_path, out: str, *extra: str) -> str:
    result = invoke(gpt2_path, tmp_path, out, *extra)
    assert result.exit_code == 2, result.output
    return " ".join(result.output.split())  # the message as one line, however the terminal wrapped it


def files(folder) -> set[str]:
    """Every file under ``folder`` but Prefect's results and the lock."""
    found = {str(p.relative_to(folder)) for p in folder.rglob("*") if p.is_file()}
    return {f for f in found if not f.startswith(".h5pipe") and "/.h5pipe/" not in f and not f.endswith(".lock")}


def test_dropping_val_size_is_refused_and_with_overwrite_removes_the_splits(c4_chunks, gpt2_path, tmp_path):
    """Left there, validation/ stayed complete and readable while its rows were in the new output."""
    cache(gpt2_path, tmp_path, "whole")
    cache(gpt2_path, tmp_path, "o", "--val-size", "25", "--seed", "7")
    before = files(tmp_path / "o")
    message = refused(gpt2_path, tmp_path, "o")
    assert "the train and validation splits" in message and "--val-size 25" in message and "--overwrite" in message
    assert files(tmp_path / "o") == before  # refused before anything was written
    dry = invoke(gpt2_path, tmp_path, "o", "--overwrite", "--dry-run")
    assert json.loads(dry.stdout[dry.stdout.index("{") :])["removes"] == ["train", "validation"]
    cache(gpt2_path, tmp_path, "o", "--overwrite")
    assert files(tmp_path / "o") == files(tmp_path / "whole")  # nothing of the split run is left
    assert samples(tmp_path / "o") == samples(tmp_path / "whole")
    assert verify_output(str(tmp_path / "o")).ok


def test_shuffle_without_val_size_removes_the_validation_split_with_overwrite(c4_chunks, gpt2_path, tmp_path):
    cache(gpt2_path, tmp_path, "whole")
    cache(gpt2_path, tmp_path, "o", "--val-size", "0.1", "--shuffle", "--seed", "7")
    message = refused(gpt2_path, tmp_path, "o", "--shuffle", "--seed", "7")
    assert "the validation split" in message and "--val-size 0.1 --shuffle" in message
    assert verify_output(str(tmp_path / "o" / "validation")).ok  # still all there
    cache(gpt2_path, tmp_path, "o", "--shuffle", "--seed", "7", "--overwrite")
    assert not files(tmp_path / "o" / "validation")
    assert not (tmp_path / "o" / "_prepared" / "validation").exists()
    record = json.loads((tmp_path / "o" / "h5pipe-splits.json").read_text())
    assert list(record["splits"]) == ["train"] and record["val_size"] is None
    assert Counter(samples(tmp_path / "o" / "train")) == Counter(samples(tmp_path / "whole"))


def test_splits_into_a_folder_of_unsplit_outputs_are_refused_and_replace_them_with_overwrite(
    c4_chunks, gpt2_path, tmp_path
):
    cache(gpt2_path, tmp_path, "o")
    message = refused(gpt2_path, tmp_path, "o", "--val-size", "25")
    assert "the unsplit outputs in the folder itself" in message and "--overwrite" in message
    cache(gpt2_path, tmp_path, "o", "--val-size", "25", "--overwrite")
    top = {f for f in files(tmp_path / "o") if "/" not in f}
    assert top == {"h5pipe-splits.json"}  # the unsplit outputs, their manifest and run record are gone
    assert len(samples(tmp_path / "o" / "validation")) == 25


def test_a_split_whose_removal_was_cut_short_is_removed_without_overwrite(c4_chunks, gpt2_path, tmp_path):
    """It holds nothing to keep: its manifest lists no output, only the files still to remove."""
    cache(gpt2_path, tmp_path, "o", "--val-size", "25", "--shuffle")
    validation = tmp_path / "o" / "validation"
    manifest = load_manifest(str(validation))
    cut_short = Manifest(
        manifest.stage, manifest.config_hash, complete=False, dropping=manifest.file_urls(str(validation))
    )
    save_manifest(str(validation), cut_short.to_json())
    cache(gpt2_path, tmp_path, "o", "--shuffle")
    assert not files(validation)
