"""Mixing several datasets, as sources: the acceptance on the fixtures (weights multiply each
dataset's rows, the same seed gives the same bytes, streaming the same rows) and LLaMA-Factory
v1's counts on mixtures of any shape (the plan itself: test_mixing.py)."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.errors import ConfigError
from pipeline_core.sources import MixtureSource, open_source
from pipeline_core.sources import mixture as mixture_module
from pipeline_core.sources.dataset_info import DatasetEntry
from pipeline_core.sources.mixture import Part
from pipeline_core.sources.single import DatasetSource
from pipeline_core.stages.export import export_chunk, export_source, plan_chunks
from tests.pipeline_core.sources.test_mixing import llamafactory_v1_rows, weight_st

pytestmark = pytest.mark.usefixtures("hf_offline")


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


def test_weights_multiply_each_datasets_rows(llamafactory, tmp_path):
    result = export_source(write_mix(tmp_path, llamafactory), tmp_path / "out", chunk_size=256, seed=7)
    expected = {"alpaca": 999 * 2, "glaive": 300, "v1_sft": 500}  # LLaMA-Factory v1: int(rows * weight)
    assert sources_of(result.urls) == expected and result.rows_out == 2798
    counts = {n: (c.rows_available, c.rows_taken, c.rows_upsampled, c.rows_read) for n, c in result.datasets.items()}
    assert counts == {"alpaca": (999, 1998, 999, 1998), "glaive": (300, 300, 0, 300), "v1_sft": (500, 500, 0, 500)}
    first_chunk = sources_of(result.urls[:1])  # interleaved, not concatenated
    assert set(first_chunk) == {"alpaca", "glaive", "v1_sft"}


def write_texts(folder: Path, sizes: dict[str, int], **fields: dict) -> Path:
    """A v1 dataset_info of text datasets ``name`` with ``sizes[name]`` rows ``"name i"``."""
    entries = {}
    for name, n in sizes.items():
        (folder / f"{name}.jsonl").write_text("".join(json.dumps({"text": f"{name} {i}"}) + "\n" for i in range(n)))
        entries[name] = {"path": str(folder / f"{name}.jsonl"), "source": "local", "converter": "text"}
        entries[name].update(fields.get(name, {}))
    path = folder / "dataset_info.yaml"
    path.write_text(yaml.safe_dump(entries))
    return path


def uses_of(source) -> Counter:
    return Counter((r.dataset, r.index) for r in source.records())


def test_weight_1_takes_every_row_of_every_dataset(tmp_path):
    """The reported case: A 100 rows, B 1000, both weight 1.0. LLaMA-Factory v1 gives 100 + 1000."""
    source = open_source(write_texts(tmp_path, {"A": 100, "B": 1000}, A={"weight": 1.0}, B={"weight": 1.0}))
    assert source.num_rows == 1100
    uses = uses_of(source)
    assert len(uses) == 1100 and set(uses.values()) == {1}  # every row once: none repeated, none left out
    assert [c.rows_upsampled for c in source.summary().values()] == [0, 0]


def test_a_lone_datasets_weight_applies(tmp_path, llamafactory):
    source = open_source(write_texts(tmp_path, {"A": 100}, A={"weight": 0.5}), seed=4)
    uses = uses_of(source)
    assert source.num_rows == 50 and len(uses) == 50 and set(uses.values()) == {1}  # half, no repeats
    identity = {"identity": {"file_name": str(llamafactory / "identity.json"), "formatting": "alpaca", "weight": 0.5}}
    (tmp_path / "identity.yaml").write_text(yaml.safe_dump(identity))
    assert open_source(tmp_path / "identity.yaml").num_rows == 45  # int(91 * 0.5)


@pytest.mark.parametrize("streaming", [False, True])
def test_size_beyond_the_rows_repeats_rows_and_counts_them(tmp_path, streaming, caplog):
    info = write_texts(tmp_path, {"A": 100, "B": 30}, A={"size": 250})
    with caplog.at_level(logging.WARNING, logger="pipeline_core.sources.mixture"):
        source = open_source(info, seed=2, streaming=streaming)
    summary = {n: (c.rows_available, c.rows_taken, c.rows_upsampled) for n, c in source.summary().items()}
    assert summary == {"A": (100, 250, 150), "B": (30, 30, 0)}
    uses = uses_of(source)
    assert sorted({n for (d, _), n in uses.items() if d == "A"}) == [2, 3]  # 250 = 2 passes + 50 more
    assert sum(n for (d, _), n in uses.items() if d == "A") == 250 and len(uses) == 130
    assert "dataset 'A': 150 of the 250 rows it gives are repeats (size 250, from 100 rows)" in caplog.text


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


def test_a_new_plan_version_changes_the_fingerprint(llamafactory, tmp_path, monkeypatch):
    """Exports planned by the share rule (MIX_VERSION 1) are cached under other keys: redone, not reused."""
    mix = write_mix(tmp_path, llamafactory)
    now = open_source(mix).fingerprint
    monkeypatch.setattr(mixture_module, "MIX_VERSION", 1)
    assert open_source(mix).fingerprint != now


def test_streaming_mixture_gives_the_same_bytes(llamafactory, tmp_path):
    mix = write_mix(tmp_path, llamafactory)
    sized = export_source(mix, tmp_path / "sized", chunk_size=300, seed=5)
    streamed = export_source(mix, tmp_path / "streamed", chunk_size=300, seed=5, streaming=True)
    assert plan_chunks(mix, 300, streaming=True) is None
    assert files_bytes(sized.urls) == files_bytes(streamed.urls)
    assert {n: c.to_dict() for n, c in sized.datasets.items()} == {n: c.to_dict() for n, c in streamed.datasets.items()}


def test_chunks_export_on_their_own(llamafactory, tmp_path):
    mix = write_mix(tmp_path, llamafactory)
    whole = export_source(mix, tmp_path / "whole", chunk_size=700, seed=2)
    n = plan_chunks(mix, 700, seed=2)
    assert n == len(whole.urls) == 4  # 2798 rows
    alone = [export_chunk(mix, i, tmp_path / "alone", chunk_size=700, seed=2).output_url for i in reversed(range(n))]
    assert files_bytes(alone[::-1]) == files_bytes(whole.urls)


def test_total_rescales_the_counts_upsamples_evenly_and_counts_it(llamafactory, tmp_path):
    """Weights 2, 1, 1 give 1998, 300, 500 rows; total=3000 rescales them to 2142, 322, 536 (the
    largest-remainder split worked out in test_total_rescales_the_counts_by_largest_remainder)."""
    source = open_source(write_mix(tmp_path, llamafactory), total=3000, seed=1)
    counts = {n: (c.rows_taken, c.rows_upsampled) for n, c in source.summary().items()}
    assert counts == {"alpaca": (2142, 2142 - 999), "glaive": (322, 22), "v1_sft": (536, 36)}
    uses = Counter((r.dataset, r.index) for r in source.records())
    for name, rows in (("alpaca", 999), ("glaive", 300), ("v1_sft", 500)):
        times = [uses[(name, i)] for i in range(rows)]
        assert max(times) - min(times) <= 1  # repeats spread evenly, no row left out
    small = open_source(write_mix(tmp_path, llamafactory), total=40, seed=1)
    assert [(c.rows_taken, c.rows_upsampled) for c in small.summary().values()] == [(29, 0), (4, 0), (7, 0)]
    unweighted = open_source(write_mix(tmp_path, llamafactory, weights=(None, None, None)), total=1799 * 2)
    assert [c.rows_taken for c in unweighted.summary().values()] == [999 * 2, 300 * 2, 500 * 2]


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


def test_lone_streaming_entry_is_read_through_unless_it_needs_a_count(llamafactory, tmp_path, monkeypatch):
    counted = []
    count_rows = mixture_module.count_rows
    monkeypatch.setattr(
        mixture_module, "count_rows", lambda src, limit: counted.append(limit) or count_rows(src, limit)
    )
    info = tmp_path / "one.yaml"
    entry = {"file_name": str(llamafactory / "c4_demo.jsonl"), "converter": "text", "streaming": True}
    info.write_text(yaml.safe_dump({"c4": entry}))
    source = open_source(info)
    assert source.num_rows is None and len(list(source)) == 300 and counted == []  # read through, never counted
    info.write_text(yaml.safe_dump({"c4": {**entry, "size": 50}}))
    source = open_source(info)
    assert source.num_rows is None and len(list(source)) == 50 and counted == [50]  # counted up to its size
    result = export_source(info, tmp_path / "out", chunk_size=20)
    assert [c.rows_out for c in result.chunks] == [20, 20, 10]
    assert result.datasets["c4"].rows_read == 50
    info.write_text(yaml.safe_dump({"c4": {**entry, "weight": 0.5}}))
    assert len(list(open_source(info))) == 150 and counted[-1] is None  # a weight needs the whole count


def test_weights_on_some_entries_only_multiply_those(llamafactory, tmp_path):
    source = open_source(write_mix(tmp_path, llamafactory, weights=(2, None, 0.5)))
    assert {n: c.rows_taken for n, c in source.summary().items()} == {"alpaca": 1998, "glaive": 300, "v1_sft": 250}
    assert {n: c.weight for n, c in source.summary().items()} == {"alpaca": 2, "glaive": None, "v1_sft": 0.5}


def test_a_weight_that_truncates_to_no_rows_gives_none_and_says_so(tmp_path, caplog):
    """int(3 * 0.1) == 0: LLaMA-Factory v1 takes nothing from such a dataset; so does h5pipe, with a warning."""
    info = write_texts(tmp_path, {"A": 3, "B": 10}, A={"weight": 0.1})
    with caplog.at_level(logging.WARNING, logger="pipeline_core.sources.mixture"):
        source = open_source(info)
    assert source.num_rows == 10 and {r.dataset for r in source.records()} == {"B"}
    assert source.summary()["A"].rows_taken == 0
    assert "dataset 'A' gives none of its 3 rows (int(3 rows x weight 0.1) = 0); raise its weight" in caplog.text


class Stream:
    """Rows without a length: a ``DatasetSource`` reads them as a stream (one pass per iteration)."""

    def __init__(self, rows: list[dict]) -> None:
        self.rows = rows

    def __iter__(self):
        return iter(self.rows)


def mix_in_memory(specs: dict[str, tuple[int, dict]], streaming: bool = False, **options) -> MixtureSource:
    """A mixture of in-memory datasets: name -> (rows, entry fields); row i of ``name`` is {"i": i}."""
    parts = []
    for name, (n, fields) in specs.items():
        rows = [{"i": i} for i in range(n)]
        source = DatasetSource(Stream(rows) if streaming else rows, name=name, fingerprint=lambda: "rows")
        parts.append(Part(DatasetEntry(name, location=name, **fields), source))
    return MixtureSource(parts, name="mix", **options)


def test_a_dataset_with_no_rows_is_refused_only_when_it_must_give_some():
    with pytest.raises(ConfigError, match=r"dataset 'empty' has no rows but is to give 5 \(size 5\); remove it"):
        mix_in_memory({"a": (4, {}), "empty": (0, {"size": 5})})
    source = mix_in_memory({"a": (4, {}), "empty": (0, {"weight": 2.0})})  # int(0 * 2.0) = 0, as in LLaMA-Factory
    assert source.num_rows == 4 and source.summary()["empty"].rows_taken == 0


def test_a_mixture_too_large_to_plan_says_what_to_lower():
    with pytest.raises(ConfigError, match=r"would hold 10,000,000,000,000,000,000,000 rows; lower weight"):
        mix_in_memory({"a": (10, {"weight": 1e21})})


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(
            st.integers(0, 40),
            st.none() | st.integers(1, 60),
            weight_st.filter(lambda w: w is None or w <= 3),
            st.booleans(),
        ),
        min_size=1,
        max_size=3,
    ),
    st.integers(0, 2**16),
)
def test_mixtures_give_llamafactory_counts_and_repeat_only_beyond_the_rows(specs, seed):
    specs = [(n, s if n or s is None else None, w, shuffle) for n, s, w, shuffle in specs]  # no size on no rows
    named = {f"d{k}": (n, {"size": s, "weight": w, "shuffle": shuffle}) for k, (n, s, w, shuffle) in enumerate(specs)}
    source = mix_in_memory(named, seed=seed)
    order = [(r.dataset, r.index) for r in source.records()]
    streamed = mix_in_memory(named, streaming=True, seed=seed)
    assert [(r.dataset, r.index) for r in streamed.records()] == order  # a stream gives the same rows
    uses = Counter(order)
    for k, (n, s, w, shuffle) in enumerate(specs):
        name, count = f"d{k}", llamafactory_v1_rows(n, s, w)
        offered = n if s is None else min(s, n)
        counts = source.summary()[name]
        assert (counts.rows_available, counts.rows_taken, counts.rows_upsampled) == (
            offered,
            count,
            max(0, count - offered),
        )
        times = [t for (d, _), t in uses.items() if d == name]
        assert sum(times) == count
        if count <= offered:
            assert set(times) <= {1}  # without replacement
        else:
            assert len(times) == offered and max(times) - min(times) <= 1  # every offered row, repeats spread evenly
        if s is not None and not shuffle:
            assert all(i < s for (d, i) in uses if d == name)  # size without shuffle: the first rows


def test_source_tag_can_be_switched_off(llamafactory, tmp_path):
    result = export_source(write_mix(tmp_path, llamafactory), tmp_path / "out", tag_source=False)
    assert all("_source" not in json.loads(line) for line in Path(result.urls[0]).read_text("utf-8").splitlines())
