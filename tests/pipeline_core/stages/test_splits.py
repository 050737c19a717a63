"""Splits and the global shuffle, on JSONL rows: deterministic for a seed, the union is the input,
no row in both splits, the shuffle a permutation spanning chunks, memory held to one bucket."""

from __future__ import annotations

import json
import math
import os
from collections import Counter

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.errors import ConfigError
from pipeline_core.stages import splits as splits_module
from pipeline_core.stages.splits import SplitOptions, iter_lines, prepare_splits


def write_chunks(folder, sizes):
    folder.mkdir(parents=True, exist_ok=True)
    paths, g = [], 0
    for i, n in enumerate(sizes):
        path = folder / f"train_chunk_{i}.jsonl"
        path.write_text("".join(json.dumps({"text": f"row {g + k}", "g": g + k}) + "\n" for k in range(n)))
        paths.append(str(path))
        g += n
    return paths


def rows_of(shards) -> list[int]:
    return [json.loads(line)["g"] for url in shards for line in iter_lines(url)]


def test_validation_split_is_seeded_exact_and_disjoint(tmp_path):
    inputs = write_chunks(tmp_path / "in", [40, 0, 35, 25])
    options = SplitOptions(val_size=0.1, seed=7)
    first = prepare_splits(inputs, str(tmp_path / "a"), options)
    again = prepare_splits(inputs, str(tmp_path / "b"), options)
    train, val = rows_of(first.shards["train"]), rows_of(first.shards["validation"])
    assert (rows_of(again.shards["train"]), rows_of(again.shards["validation"])) == (train, val)
    assert len(val) == math.ceil(0.1 * 100) and first.rows == {"train": 90, "validation": 10}
    assert sorted(train + val) == list(range(100)) and not set(train) & set(val)
    assert train == sorted(train) and val == sorted(val)  # no shuffle: file order kept
    other = prepare_splits(inputs, str(tmp_path / "c"), SplitOptions(val_size=0.1, seed=8))
    assert rows_of(other.shards["validation"]) != val
    counted = prepare_splits(inputs, str(tmp_path / "d"), SplitOptions(val_size=13, seed=7))
    assert counted.rows["validation"] == 13


def test_the_split_does_not_depend_on_the_chunking(tmp_path):
    one = write_chunks(tmp_path / "one", [100])
    four = write_chunks(tmp_path / "four", [10, 50, 30, 10])
    a = prepare_splits(one, str(tmp_path / "a"), SplitOptions(val_size=0.2, seed=3))
    b = prepare_splits(four, str(tmp_path / "b"), SplitOptions(val_size=0.2, seed=3))
    assert rows_of(a.shards["validation"]) == rows_of(b.shards["validation"])


@settings(max_examples=25, deadline=None)
@given(sizes=st.lists(st.integers(0, 30), min_size=1, max_size=5), seed=st.integers(0, 2**32 - 1))
def test_shuffle_is_a_seeded_permutation_across_chunks(tmp_path_factory, sizes, seed):
    tmp = tmp_path_factory.mktemp("shuf")
    inputs = write_chunks(tmp / "in", sizes)
    options = SplitOptions(seed=seed, shuffle=True, bucket_bytes=300)  # several buckets for most inputs
    first = rows_of(prepare_splits(inputs, str(tmp / "a"), options).shards["train"])
    assert Counter(first) == Counter(range(sum(sizes)))
    assert rows_of(prepare_splits(inputs, str(tmp / "b"), options).shards["train"]) == first


def test_shuffle_mixes_chunks_and_differs_from_the_input_order(tmp_path):
    inputs = write_chunks(tmp_path / "in", [50, 50])
    prepared = prepare_splits(inputs, str(tmp_path / "o"), SplitOptions(seed=1, shuffle=True, bucket_bytes=1000))
    order = rows_of(prepared.shards["train"])
    assert order != list(range(100)) and sorted(order) == list(range(100))
    first_shard = rows_of(prepared.shards["train"][:1])
    assert {g < 50 for g in first_shard} == {True, False}  # a shard holds rows of both chunks
    assert len(prepared.shards["train"]) == math.ceil(
        sum(os.path.getsize(u) for u in inputs) / 1000
    )  # no validation: all rows


def test_shuffle_reads_one_bucket_at_a_time(tmp_path, monkeypatch):
    """Memory is bounded by a bucket: pass 2 never holds more lines than one bucket file has."""
    inputs = write_chunks(tmp_path / "in", [300, 300])
    held = []
    real = splits_module._permute_bucket

    def watched(bucket, out, seed, split, b):
        held.append(os.path.getsize(bucket))
        return real(bucket, out, seed, split, b)

    monkeypatch.setattr(splits_module, "_permute_bucket", watched)
    prepare_splits(inputs, str(tmp_path / "o"), SplitOptions(seed=2, shuffle=True, bucket_bytes=4096))
    total = sum(os.path.getsize(u) for u in inputs)
    assert len([h for h in held if h]) >= total // 4096 and max(held) < 2 * 4096


def test_shuffled_split_and_a_rerun_that_changes_nothing(tmp_path):
    inputs = write_chunks(tmp_path / "in", [60, 40])
    options = SplitOptions(val_size=0.25, seed=5, shuffle=True, bucket_bytes=800)
    first = prepare_splits(inputs, str(tmp_path / "o"), options)
    train, val = rows_of(first.shards["train"]), rows_of(first.shards["validation"])
    assert len(val) == 25 and sorted(train + val) == list(range(100)) and val != sorted(val)
    mtimes = {
        u: (tmp_path / "o").joinpath(*u.split("/")[-2:]).stat().st_mtime_ns for s in first.shards.values() for u in s
    }
    prepare_splits(inputs, str(tmp_path / "o"), options)
    assert mtimes == {u: (tmp_path / "o").joinpath(*u.split("/")[-2:]).stat().st_mtime_ns for u in mtimes}


@pytest.mark.parametrize(
    ("val_size", "message"),
    [
        (0, "val_size must be"),
        (1.5, "val_size must be"),
        (100, "gives 100 validation rows of 10"),
        (-1, "val_size must"),
    ],
)
def test_bad_val_sizes_say_what_to_change(tmp_path, val_size, message):
    inputs = write_chunks(tmp_path / "in", [10])
    with pytest.raises(ConfigError, match=message):
        prepare_splits(inputs, str(tmp_path / "o"), SplitOptions(val_size=val_size))


def same_named_chunks(tmp_path) -> list[str]:
    paths = []
    for folder, first in (("a", 0), ("b", 10)):
        (tmp_path / folder).mkdir()
        path = tmp_path / folder / "train_chunk_0.jsonl"
        path.write_text("".join(json.dumps({"text": f"row {g}", "g": g}) + "\n" for g in range(first, first + 10)))
        paths.append(str(path))
    return paths


def test_inputs_of_one_name_are_refused_before_anything_is_written(tmp_path):
    inputs = same_named_chunks(tmp_path)
    with pytest.raises(ConfigError) as refused:
        prepare_splits(inputs, str(tmp_path / "prep"), SplitOptions(val_size=2, seed=0))
    message = str(refused.value)
    assert inputs[0] in message and inputs[1] in message and "train_chunk_0.jsonl" in message
    assert "rename one of them" in message
    assert not (tmp_path / "prep").exists()


def test_shuffled_shards_are_numbered_so_inputs_of_one_name_keep_every_row(tmp_path):
    prepared = prepare_splits(
        same_named_chunks(tmp_path), str(tmp_path / "prep"), SplitOptions(val_size=2, shuffle=True)
    )
    train, val = rows_of(prepared.shards["train"]), rows_of(prepared.shards["validation"])
    assert sorted(train + val) == list(range(20)) and len(val) == 2


def test_blank_lines_are_left_out_and_counted(tmp_path):
    rows = [json.dumps({"text": f"row {g}", "g": g}) for g in range(12)]
    texts = [
        "\n".join(rows[:5]) + "\n\n   \n" + "\n".join(rows[5:8]) + "\n",
        "\t\r\n" + "\n".join(rows[8:]),  # a whitespace-only first line, no newline at the end
    ]
    inputs = []
    for i, text in enumerate(texts):
        (tmp_path / f"c{i}.jsonl").write_text(text)
        inputs.append(str(tmp_path / f"c{i}.jsonl"))
    blank = sum(1 for text in texts for line in text.splitlines() if not line.strip())
    for shuffle in (False, True):
        prepared = prepare_splits(inputs, str(tmp_path / f"prep{shuffle}"), SplitOptions(val_size=3, shuffle=shuffle))
        assert prepared.blank_lines == blank == 3
        assert sorted(rows_of(prepared.shards["train"]) + rows_of(prepared.shards["validation"])) == list(range(12))
        assert sum(prepared.rows.values()) == 12
