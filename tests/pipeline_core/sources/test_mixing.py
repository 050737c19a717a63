"""Mixing several datasets: the plan's invariants (hypothesis) and the acceptance on the fixtures:
2:1:1 weights give 2:1:1 counts, the same seed gives the same bytes, streaming the same rows."""

from __future__ import annotations

import json
from collections import Counter
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.errors import ConfigError
from pipeline_core.sources import Interleave, Selection, apportion, mix_counts, open_source
from pipeline_core.sources.mixing import Subset
from pipeline_core.stages.export import export_chunk, export_source, plan_chunks

pytestmark = pytest.mark.usefixtures("hf_offline")


# --- the plan -------------------------------------------------------------------------------------

rows_st = st.lists(st.integers(1, 5000), min_size=1, max_size=5)


@given(st.integers(0, 10**6), st.lists(st.integers(1, 50), min_size=1, max_size=6))
def test_apportion_is_exact_and_within_one_of_the_quota(total, weights):
    counts = apportion(total, [Fraction(w) for w in weights])
    assert sum(counts) == total
    for count, w in zip(counts, weights):
        assert abs(count - Fraction(total * w, sum(weights))) < 1


@given(
    rows_st.flatmap(
        lambda rows: st.tuples(st.just(rows), st.lists(st.integers(1, 9), min_size=len(rows), max_size=len(rows)))
    )
)
def test_counts_without_total_use_the_scarcest_dataset_whole_and_repeat_nothing(case):
    rows, weights = case
    counts = mix_counts(rows, weights)
    assert all(c <= n for c, n in zip(counts, rows))  # without replacement
    total = sum(counts)
    assert total == min(n * sum(weights) // w for n, w in zip(rows, weights))  # the largest that fits
    for count, w in zip(counts, weights):
        assert abs(count - total * w / sum(weights)) < 1


def test_counts_without_weights_take_everything_and_total_rescales():
    assert mix_counts([5, 7]) == [5, 7]
    assert mix_counts([999, 300, 500], [2, 1, 1]) == [600, 300, 300]
    assert mix_counts([999, 300, 500], [2, 1, 1], total=3000) == [1500, 750, 750]
    assert mix_counts([10, 30], None, total=8) == [2, 6]


@given(st.integers(1, 300), st.integers(0, 1000), st.integers(0, 2**32), st.integers(1, 40))
def test_selection_repeats_only_when_it_must_and_evenly(rows, count, seed, block):
    selection = Selection.draw(rows, count, (seed, 0, 0))
    object.__setattr__(selection.extra, "block", block)  # small blocks: many of them
    positions = selection.positions(0, count)
    assert selection.count == count == len(positions)
    assert selection.upsampled == max(0, count - rows)
    times = np.bincount(positions, minlength=rows)
    assert times.max() - times.min() <= 1  # every row used floor or ceil(count / rows) times
    if count <= rows:
        assert len(set(positions.tolist())) == count
    for start in (0, count // 3, max(0, count - 1)):
        assert np.array_equal(selection.positions(start, count), positions[start:])


@settings(deadline=None)
@given(st.integers(1, 3000), st.integers(0, 100), st.integers(4, 64), st.integers(0, 2**32))
def test_subset_is_stratified_and_any_range_agrees(rows, percent, block, seed):
    subset = Subset.draw(rows, rows * percent // 100, (seed, 1, 2), block=block)
    whole = np.concatenate([*subset, np.empty(0, np.int64)])
    assert len(whole) == subset.count and np.all(np.diff(whole) > 0) and np.all((whole >= 0) & (whole < rows))
    for p in range(0, rows + 1, block):  # evenly spread: at block edges within one row of the share
        assert abs(np.count_nonzero(whole < p) - p * subset.count / rows) < 1
    items = np.arange(0, subset.count, 3)
    assert np.array_equal(subset.at(items), whole[items])
    assert np.array_equal(subset.positions(subset.count // 2, subset.count), whole[subset.count // 2 :])
    assert Subset.draw(rows, subset.count, (seed, 1, 2), block=block) == subset


@settings(max_examples=60)
@given(st.lists(st.integers(0, 60), min_size=1, max_size=4), st.integers(0, 1000), st.integers(1, 17))
def test_interleave_ranges_agree_with_the_whole(counts, seed, block):
    plan = Interleave(counts, seed, block=block)
    whole = np.concatenate([*plan.ids(0, plan.total), np.empty(0, np.int64)])
    assert np.array_equal(np.bincount(whole, minlength=len(counts)), counts)  # exact counts
    for start in range(0, plan.total + 1, max(1, plan.total // 5)):
        stop = min(plan.total, start + block + 3)
        part = np.concatenate([*plan.ids(start, stop), np.empty(0, np.int64)])
        assert np.array_equal(part, whole[start:stop])
        assert np.array_equal(plan.consumed_before(start), np.bincount(whole[:start], minlength=len(counts)))


def test_interleave_blocks_hold_every_share():
    plan = Interleave([5000, 3000, 2000], seed=4, block=100)
    for ids in plan.ids(0, plan.total):
        shares = np.bincount(ids, minlength=3) / len(ids)
        assert np.all(np.abs(shares * len(ids) - np.array([0.5, 0.3, 0.2]) * len(ids)) <= 1.5)


def test_plans_for_a_billion_rows_are_cheap():
    plan = Interleave([5 * 10**8, 3 * 10**8, 2 * 10**8], seed=0)
    assert plan.consumed_before(10**9 - 1).sum() == 10**9 - 1
    assert len(np.concatenate(list(plan.ids(10**9 - 20_000, 10**9)))) == 20_000
    selection = Selection.draw(10**9, 25 * 10**8, (0, 2, 0))  # upsampled 2.5x
    assert selection.upsampled == 15 * 10**8 and len(selection.positions(24 * 10**8, 24 * 10**8 + 5)) == 5


def test_interleave_depends_on_the_seed_only():
    a, b, c = (list(np.concatenate(list(Interleave([500, 300, 200], s).ids(0, 1000)))) for s in (1, 1, 2))
    assert a == b and a != c


def test_mix_counts_rejects_all_zero():
    with pytest.raises(ValueError, match="all zero"):
        mix_counts([0, 0], None, total=3)


# --- mixtures of the fixtures ---------------------------------------------------------------------


def write_mix(folder, llamafactory, weights=(2, 1, 1), **extra) -> str:
    """alpaca (999 rows), glaive tool calls (300), v1 messages (500) with the given weights."""
    entries = {
        "alpaca": {"file_name": str(llamafactory / "alpaca_en_demo.json"), "converter": "alpaca"},
        "glaive": {
            "file_name": str(llamafactory / "glaive_toolcall_en_demo.json"),
            "formatting": "sharegpt",
            "columns": {"messages": "conversations", "tools": "tools"},
        },
        "v1_sft": {"file_name": str(llamafactory / "v1_sft_demo.jsonl"), "converter": "messages"},
    }
    for entry, weight in zip(entries.values(), weights):
        if weight is not None:
            entry["weight"] = weight
    for name, fields in extra.items():
        entries[name].update(fields)
    path = folder / "mix.yaml"
    path.write_text(yaml.safe_dump(entries))
    return str(path)


def files_bytes(urls) -> list[bytes]:
    return [Path(u).read_bytes() for u in urls]


def sources_of(urls) -> Counter:
    return Counter(json.loads(line)["_source"] for u in urls for line in Path(u).read_text("utf-8").splitlines())


def test_weights_2_1_1_give_2_1_1(llamafactory, tmp_path):
    result = export_source(write_mix(tmp_path, llamafactory), tmp_path / "out", chunk_size=256, seed=7)
    total = result.rows_out
    shares = {name: count / total for name, count in sources_of(result.urls).items()}
    for name, share in {"alpaca": 0.5, "glaive": 0.25, "v1_sft": 0.25}.items():
        assert abs(shares[name] - share) <= 0.01 * share
    assert total == 1200  # glaive is the scarcest: all 300 of its rows, none repeated
    counts = {n: (c.rows_available, c.rows_taken, c.rows_upsampled, c.rows_read) for n, c in result.datasets.items()}
    assert counts == {"alpaca": (999, 600, 0, 600), "glaive": (300, 300, 0, 300), "v1_sft": (500, 300, 0, 300)}
    first_chunk = sources_of(result.urls[:1])  # interleaved, not concatenated
    assert set(first_chunk) == {"alpaca", "glaive", "v1_sft"}


def test_same_seed_same_bytes_other_seed_other_order(llamafactory, tmp_path):
    mix = write_mix(tmp_path, llamafactory)
    one = export_source(mix, tmp_path / "one", chunk_size=500, seed=11)
    two = export_source(mix, tmp_path / "two", chunk_size=500, seed=11)
    other = export_source(mix, tmp_path / "other", chunk_size=500, seed=12)
    assert files_bytes(one.urls) == files_bytes(two.urls)
    assert [c.sha256 for c in one.chunks] == [c.sha256 for c in two.chunks]
    assert files_bytes(one.urls) != files_bytes(other.urls)
    assert sources_of(one.urls) == sources_of(other.urls)
    assert open_source(mix, seed=11).fingerprint == open_source(mix, seed=11).fingerprint
    assert open_source(mix, seed=11).fingerprint != open_source(mix, seed=12).fingerprint


def test_streaming_mixture_gives_the_same_bytes(llamafactory, tmp_path):
    mix = write_mix(tmp_path, llamafactory)
    sized = export_source(mix, tmp_path / "sized", chunk_size=300, seed=5)
    streamed = export_source(mix, tmp_path / "streamed", chunk_size=300, seed=5, streaming=True)
    assert plan_chunks(mix, 300, streaming=True) is None
    assert files_bytes(sized.urls) == files_bytes(streamed.urls)
    assert {n: c.to_dict() for n, c in sized.datasets.items()} == {n: c.to_dict() for n, c in streamed.datasets.items()}


def test_chunks_export_on_their_own(llamafactory, tmp_path):
    mix = write_mix(tmp_path, llamafactory)
    whole = export_source(mix, tmp_path / "whole", chunk_size=333, seed=2)
    n = plan_chunks(mix, 333, seed=2)
    assert n == len(whole.urls) == 4
    alone = [export_chunk(mix, i, tmp_path / "alone", chunk_size=333, seed=2).output_url for i in reversed(range(n))]
    assert files_bytes(alone[::-1]) == files_bytes(whole.urls)


def test_total_upsamples_evenly_and_counts_it(llamafactory, tmp_path):
    source = open_source(write_mix(tmp_path, llamafactory), total=3000, seed=1)
    counts = {n: (c.rows_taken, c.rows_upsampled) for n, c in source.summary().items()}
    assert counts == {"alpaca": (1500, 501), "glaive": (750, 450), "v1_sft": (750, 250)}
    uses = Counter((r.dataset, r.index) for r in source.records())
    for name, rows in (("alpaca", 999), ("glaive", 300), ("v1_sft", 500)):
        times = [uses[(name, i)] for i in range(rows)]
        assert max(times) - min(times) <= 1  # repeats spread evenly, no row left out
    small = open_source(write_mix(tmp_path, llamafactory), total=40, seed=1)
    assert [c.rows_upsampled for c in small.summary().values()] == [0, 0, 0]


def test_without_weights_every_row_once(llamafactory, tmp_path):
    source = open_source(write_mix(tmp_path, llamafactory, weights=(None, None, None)))
    assert source.num_rows == 999 + 300 + 500
    uses = Counter((r.dataset, r.index) for r in source.records())
    assert len(uses) == 1799 and set(uses.values()) == {1}


def test_size_takes_the_first_rows_or_a_seeded_sample(llamafactory, tmp_path):
    mix = write_mix(
        tmp_path, llamafactory, weights=(None, None, None), alpaca={"size": 10}, glaive={"size": 20, "shuffle": True}
    )
    source = open_source(mix, seed=3)
    indices = {name: sorted(r.index for r in source.records() if r.dataset == name) for name in ("alpaca", "glaive")}
    assert indices["alpaca"] == list(range(10))
    assert len(indices["glaive"]) == 20 and indices["glaive"] != list(range(20))
    again = open_source(mix, seed=3)
    assert sorted(r.index for r in again.records() if r.dataset == "glaive") == indices["glaive"]
    streamed = open_source(mix, seed=3, streaming=True)
    assert [(r.dataset, r.index) for r in streamed.records()] == [(r.dataset, r.index) for r in source.records()]


def test_lone_streaming_entry_is_read_through(llamafactory, tmp_path):
    info = tmp_path / "one.yaml"
    entry = {"file_name": str(llamafactory / "c4_demo.jsonl"), "converter": "text", "size": 50, "streaming": True}
    info.write_text(yaml.safe_dump({"c4": entry}))
    source = open_source(info)
    assert source.num_rows is None and len(list(source)) == 50
    result = export_source(info, tmp_path / "out", chunk_size=20)
    assert [c.rows_out for c in result.chunks] == [20, 20, 10]
    assert result.datasets["c4"].rows_read == 50


def test_weights_on_some_entries_only(llamafactory, tmp_path):
    with pytest.raises(ConfigError, match=r"set weight on every dataset or on none; missing on \['v1_sft'\]"):
        open_source(write_mix(tmp_path, llamafactory, weights=(2, 1, None)))


def test_source_tag_can_be_switched_off(llamafactory, tmp_path):
    result = export_source(write_mix(tmp_path, llamafactory), tmp_path / "out", tag_source=False)
    assert all("_source" not in json.loads(line) for line in Path(result.urls[0]).read_text("utf-8").splitlines())
