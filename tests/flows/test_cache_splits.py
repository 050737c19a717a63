"""The cache flow's val_size and shuffle, from the CLI as users run them: OUTPUT/train and
OUTPUT/validation, each a committed output, identical across runs with one seed, disjoint, and
together exactly the unsplit output; --shuffle a seeded permutation of it."""

from __future__ import annotations

import json
from collections import Counter

from typer.testing import CliRunner

from flows.cli import app
from pipeline_core import H5Dataset
from pipeline_core.commit.verify import verify_output

runner = CliRunner()


def cache(gpt2_path, tmp_path, out: str, *extra: str) -> None:
    args = ["cache", "--input", str(tmp_path / "in"), "--output", str(tmp_path / out), "--tokenizer", str(gpt2_path)]
    result = runner.invoke(app, [*args, "--eos-token", "<|endoftext|>", *extra])
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
