"""dataset_info files: every LLaMA-Factory fixture goes through export with its entry and converter,
entry fields are parsed and checked, and bad entries say what to change."""

from __future__ import annotations

import json
from pathlib import Path

import fsspec
import pytest
import yaml

from pipeline_core.converters import converter_from_dataset_info
from pipeline_core.errors import ConfigError
from pipeline_core.sources import open_source, parse_dataset_info, read_dataset_info
from pipeline_core.stages.export import export_source
from tests.conftest import load_json_or_jsonl

pytestmark = pytest.mark.usefixtures("hf_offline")

# The shipped dataset_info.json has no entries for the v1 files; these are theirs.
V1_ENTRIES = {
    "v1_sft_demo": {"file_name": "v1_sft_demo.jsonl", "converter": "messages"},
    "v1_dpo_demo": {"file_name": "v1_dpo_demo.jsonl", "converter": "messages"},
}
FIXTURES = [
    "alpaca_en_demo",
    "identity",
    "glaive_toolcall_en_demo",
    "dpo_en_demo",
    "v1_sft_demo",
    "v1_dpo_demo",
    "c4_demo",
    "mllm_demo",
]


def fixture_entries(llamafactory: Path) -> dict[str, dict]:
    """Every fixture's entry, as a v1 YAML states it: absolute file names, alpaca made explicit."""
    entries = {**json.loads((llamafactory / "dataset_info.json").read_text()), **V1_ENTRIES}
    out = {}
    for name, entry in entries.items():
        entry = {**entry, "file_name": str(llamafactory / entry["file_name"])}
        if not {"converter", "formatting", "columns", "ranking"} & set(entry):
            entry["formatting"] = "alpaca"  # v0's default; in a v1 YAML rows would pass through
        out[name] = entry
    return out


@pytest.fixture(scope="module")
def fixtures_yaml(llamafactory, tmp_path_factory) -> Path:
    path = tmp_path_factory.mktemp("info") / "dataset_info.yaml"
    path.write_text(yaml.safe_dump(fixture_entries(llamafactory)))
    return path


def read_jsonl(url) -> list[dict]:
    with fsspec.open(str(url), "rt", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


@pytest.mark.parametrize("name", FIXTURES)
def test_every_fixture_exports_with_its_entry_and_converter(name, llamafactory, fixtures_yaml, tmp_path):
    entry = fixture_entries(llamafactory)[name]
    raw = load_json_or_jsonl(Path(entry["file_name"]))
    convert = converter_from_dataset_info(entry)
    result = export_source(fixtures_yaml, tmp_path, chunk_size=128, datasets=[name])
    lines = [row for url in result.urls for row in read_jsonl(url)]
    assert lines == [convert(row) for row in raw]  # counted and converted, in file order
    counts = result.datasets[name]
    assert (counts.rows_available, counts.rows_taken, counts.rows_read, counts.rows_failed) == (len(raw),) * 3 + (0,)
    assert result.rows_failed == 0 and "_source" not in lines[0]  # one dataset: no tag


def test_fixture_outputs_have_the_expected_shapes(llamafactory, fixtures_yaml, tmp_path):
    first = {}
    for name in FIXTURES:
        result = export_source(fixtures_yaml, tmp_path / name, datasets=[name])
        first[name] = read_jsonl(result.urls[0])[0]
    assert set(first["c4_demo"]) == {"text"}
    assert set(first["dpo_en_demo"]) == set(first["v1_dpo_demo"]) == {"chosen_messages", "rejected_messages"}
    for name in ("alpaca_en_demo", "identity", "glaive_toolcall_en_demo", "v1_sft_demo", "mllm_demo"):
        assert set(first[name]) == {"messages"}
    media = [b for m in first["mllm_demo"]["messages"] for b in m["content"] if b["type"] == "image_url"]
    assert [b["value"] for b in media] == ["mllm_demo_data/1.jpg", "mllm_demo_data/1.jpg"]  # kept
    roles = {
        m["role"]
        for m in read_jsonl(export_source(fixtures_yaml, tmp_path / "g", datasets=["glaive_toolcall_en_demo"]).urls[0])[
            0
        ]["messages"]
    }
    assert {"user", "assistant"} <= roles


def test_shipped_v0_dataset_info_json(llamafactory, tmp_path):
    """The v0 file as shipped: relative file names, entries without formatting are alpaca."""
    info = llamafactory / "dataset_info.json"
    assert open_source(info, datasets=["identity"]).num_rows == 91
    result = export_source(info, tmp_path, datasets=["identity", "c4_demo"], seed=3)
    assert {n: c.rows_taken for n, c in result.datasets.items()} == {"identity": 91, "c4_demo": 300}
    rows = [r for u in result.urls for r in read_jsonl(u)]
    assert sum("messages" in r for r in rows) == 91 and sum("text" in r for r in rows) == 300
    with pytest.raises(ConfigError, match=r"\['nope'\] are not in the dataset_info; available: \[.*'identity'"):
        open_source(info, datasets=["nope"])


@pytest.mark.parametrize("forced", [None, True])
def test_a_dataset_info_saved_with_a_byte_order_mark_reads_as_without(llamafactory, tmp_path, forced):
    """Windows editors save UTF-8 with a BOM: found by the sniff it was exported as one data row;
    forced, it was read as YAML, losing the v0 alpaca default (91 raw rows, unconverted)."""
    import shutil

    shutil.copy(llamafactory / "identity.json", tmp_path / "identity.json")
    entry = json.dumps({"identity": {"file_name": "identity.json"}})
    (tmp_path / "dataset_info.json").write_text(entry, encoding="utf-8-sig")
    assert (tmp_path / "dataset_info.json").read_bytes().startswith(b"\xef\xbb\xbf")
    plain = export_source(llamafactory / "dataset_info.json", tmp_path / "plain", datasets=["identity"])
    bom = export_source(tmp_path / "dataset_info.json", tmp_path / "bom", dataset_info=forced)
    assert read_jsonl(bom.urls[0]) == read_jsonl(plain.urls[0]) and len(read_jsonl(bom.urls[0])) == 91


def test_v0_entries_read_only_the_columns_llamafactory_reads(tmp_path):
    """LLaMA-Factory's v0 parser reads system, history and tools only when ``columns`` maps them,
    and a ``columns`` (``tags``) object turns off every column (tag) it does not name; h5pipe read
    such unmapped columns of the data with its own defaults. Expected turns written by hand."""
    alpaca = [{"instruction": "Q1", "input": "ctx", "output": "A1", "system": "S", "history": [["old q", "old a"]]}]
    sharegpt = [{"conversations": [{"from": "human", "value": "hi"}, {"from": "gpt", "value": "yo"}], "system": "S"}]
    roles = [
        {
            "messages": [
                {"role": "system", "content": "S"},
                {"role": "user", "content": "hi"},
                {"role": "assistant", "content": "yo"},
            ]
        }
    ]
    for name, rows in (("a", alpaca), ("s", sharegpt), ("r", roles)):
        (tmp_path / f"{name}.json").write_text(json.dumps(rows))
    tags = {"role_tag": "role", "content_tag": "content", "user_tag": "user", "assistant_tag": "assistant"}
    info = {
        "plain": {"file_name": "a.json"},
        "named": {"file_name": "a.json", "columns": {"prompt": "instruction", "response": "output"}},
        "mapped": {
            "file_name": "a.json",
            "columns": {
                "prompt": "instruction",
                "query": "input",
                "response": "output",
                "system": "system",
                "history": "history",
            },
        },
        "sharegpt": {"file_name": "s.json", "formatting": "sharegpt"},
        "tags": {"file_name": "r.json", "formatting": "sharegpt", "columns": {"messages": "messages"}, "tags": tags},
    }
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))

    def turns(name):
        result = export_source(tmp_path / "dataset_info.json", tmp_path / name, datasets=[name])
        rows = read_jsonl(result.urls[0])
        return [[(m["role"], m["content"][0]["value"]) for m in r["messages"]] for r in rows], result.chunks[0].failed

    assert turns("plain") == ([[("user", "Q1\nctx"), ("assistant", "A1")]], {})
    assert turns("named") == ([[("user", "Q1"), ("assistant", "A1")]], {})
    mapped = [("system", "S"), ("user", "old q"), ("assistant", "old a"), ("user", "Q1\nctx"), ("assistant", "A1")]
    assert turns("mapped") == ([mapped], {})
    assert turns("sharegpt") == ([[("user", "hi"), ("assistant", "yo")]], {})
    assert turns("tags") == ([], {"invalid_turn_order": 1})  # system_tag unnamed: off, as LLaMA-Factory skips the row


def test_v0_sharegpt_rows_out_of_turn_are_counted_as_llamafactory_drops_them(tmp_path):
    """LLaMA-Factory keeps a v0 sharegpt row only when, after an optional leading system turn,
    asks and answers alternate and it ends with an answer (a ranking prompt: with an ask); h5pipe
    wrote the others as they were, uncounted. The fixtures' own rows all pass (the fixture tests)."""

    def turn(role, value):
        return {"from": role, "value": value}

    human, gpt, system = (lambda v, r=r: turn(r, v) for r in ("human", "gpt", "system"))
    rows = [
        [system("s"), human("ok"), gpt("ok")],
        [human("q1"), gpt("a1"), human("dangling")],
        [human("q1"), human("q2"), gpt("a")],
        [gpt("first"), human("q"), gpt("a")],
        [human("q"), gpt("a"), system("late"), human("q2"), gpt("a2")],
    ]
    (tmp_path / "sg.json").write_text(json.dumps([{"conversations": c} for c in rows]))
    pairs = [{"conversations": [human("q")], "chosen": gpt("y"), "rejected": gpt("n")}]
    pairs.append({"conversations": [human("q"), gpt("a")], "chosen": gpt("y"), "rejected": gpt("n")})
    (tmp_path / "pairs.json").write_text(json.dumps(pairs))
    ranking = {"messages": "conversations", "chosen": "chosen", "rejected": "rejected"}
    info = {
        "sg": {"file_name": "sg.json", "formatting": "sharegpt"},
        "pairs": {"file_name": "pairs.json", "formatting": "sharegpt", "ranking": True, "columns": ranking},
    }
    (tmp_path / "dataset_info.json").write_text(json.dumps(info))
    result = export_source(tmp_path / "dataset_info.json", tmp_path / "sg", datasets=["sg"])
    assert [[m["role"] for m in r["messages"]] for r in read_jsonl(result.urls[0])] == [["system", "user", "assistant"]]
    assert result.chunks[0].failed == {"invalid_turn_count": 1, "invalid_turn_order": 3}
    errors = read_jsonl(result.chunks[0].errors_url)
    assert [(e["index"], e["field"]) for e in errors][1:] == [
        (2, "conversations[1].from"),
        (3, "conversations[0].from"),
        (4, "conversations[2].from"),
    ]
    pairs_out = export_source(tmp_path / "dataset_info.json", tmp_path / "pairs", datasets=["pairs"])
    assert len(read_jsonl(pairs_out.urls[0])) == 1 and pairs_out.chunks[0].failed == {"invalid_turn_count": 1}


# --- parsing ------------------------------------------------------------------------------------


def parse(data, base="/data", v0=False):
    return parse_dataset_info(data, base, v0_default=v0)


def test_entry_fields_and_path_resolution():
    entries = parse(
        {
            "a": {"file_name": "sub/a.jsonl", "converter": "alpaca", "size": 10, "weight": 2, "shuffle": True},
            "b": {"path": "owner/b", "source": "hf", "split": "validation", "subset": "en", "streaming": True},
            "c": {"path": "/abs/c.parquet", "source": "local"},
            "d": {"cloud_file_name": "s3://bucket/d.jsonl", "formatting": "sharegpt"},
            "e": {"hf_hub_url": "owner/e", "ranking": True, "formatting": "sharegpt"},
        }
    )
    a, b, c, d, e = entries
    assert (a.location, a.hub, a.converter, a.size, a.weight, a.shuffle) == (
        "/data/sub/a.jsonl",
        False,
        ("alpaca", {}),
        10,
        2,
        True,
    )
    assert type(a.weight) is int  # as written: int(rows * 2) stays exact, as LLaMA-Factory computes it
    assert parse({"f": {"file_name": "f.json", "weight": 0.29}})[0].weight == 0.29
    assert (b.location, b.hub, b.split, b.subset, b.streaming, b.converter) == (
        "owner/b",
        True,
        "validation",
        "en",
        True,
        None,  # v1 YAML without a converter: rows are already standard
    )
    assert (c.location, c.hub, c.split) == ("/abs/c.parquet", False, "train")
    off = {"system": None, "tools": None, "images": None, "videos": None, "audios": None}
    assert (d.location, d.converter) == ("s3://bucket/d.jsonl", ("sharegpt", {"columns": off, "turn_order": True}))
    pair_columns = {"messages": "conversations", "query": None, "history": None, **off}
    assert e.converter == ("pair", {"columns": pair_columns, "prompt_from": "sharegpt", "turn_order": True})
    assert parse({"a": {"file_name": "a.json"}}, v0=True)[0].converter == (
        "alpaca",
        {"columns": {"history": None, **off}},
    )
    assert parse({"a": {"file_name": "x.jsonl"}}, base="s3://b/cfg")[0].location == "s3://b/cfg/x.jsonl"


@pytest.mark.parametrize(
    ("entry", "message"),
    [
        ({"file_name": "a", "hf_hub_url": "o/a"}, r"exactly one of file_name.*got \['file_name', 'hf_hub_url'\]"),
        ({"ms_hub_url": "o/a"}, r"is on ModelScope \('o/a'\).*modelscope download --dataset o/a"),
        ({"om_hub_url": "o/a"}, r"is on Modelers"),
        ({"path": "o/a", "source": "ms_hub"}, r"is on ModelScope"),
        ({"cloud_file_name": "s3://b/a", "ms_hub_url": "o/a"}, r"exactly one of"),
        ({"script_url": "a"}, "script_url .* is not supported"),
        ({"file_name": "a", "num_samples": 3}, "num_samples is not supported.*use those"),
        ({"file_name": "a", "colums": {}}, r"unknown keys \['colums'\]"),
        ({"file_name": "a", "size": 0}, "size must be a positive whole number"),
        ({"file_name": "a", "size": 2.5}, "size must be a positive whole number"),
        ({"file_name": "a", "weight": 0}, "weight must be a positive number"),
        ({"file_name": "a", "weight": "2"}, "weight must be a positive number"),
        ({"file_name": "a", "shuffle": "yes"}, "shuffle must be true or false"),
        ({"path": "a", "source": "ms"}, "source must be one of hf_hub, ms_hub, om_hub, local, got 'ms'"),
        ({"file_name": "a", "source": "hf"}, "source goes with path"),
        ({"file_name": "a", "converter": "nope"}, "unknown converter 'nope'"),
        ({"file_name": "a", "converter": "alpaca", "formatting": "alpaca"}, "keep only one style"),
        ({"file_name": "a", "formatting": "alpaca", "tags": {"role_tag": "r"}}, "tags only apply"),
        ("a.jsonl", "an entry must be a mapping"),
    ],
)
def test_bad_entries_name_the_dataset_and_the_fix(entry, message):
    with pytest.raises(ConfigError, match=message) as info:
        parse({"mine": entry})
    assert "'mine'" in str(info.value)


def test_bad_files(tmp_path):
    (tmp_path / "empty.yaml").write_text("")
    with pytest.raises(ConfigError, match="must map dataset names to entries"):
        read_dataset_info(str(tmp_path / "empty.yaml"))
    (tmp_path / "broken.yaml").write_text("a: [1,\n")
    with pytest.raises(ConfigError, match="cannot parse dataset_info"):
        read_dataset_info(str(tmp_path / "broken.yaml"))
    (tmp_path / "nested.yaml").write_text(yaml.safe_dump({"x": {"file_name": "broken.yaml"}}))
    with pytest.raises(ConfigError, match="points at another dataset_info"):
        open_source(tmp_path / "nested.yaml")
    with pytest.raises(ConfigError, match="converter is set per dataset"):
        open_source(tmp_path / "nested.yaml", converter="alpaca")


def test_yaml_on_a_memory_url_resolves_relative_names():
    fs = fsspec.filesystem("memory")
    fs.pipe("/cfg/data/a.jsonl", b'{"text": "hello"}\n{"text": "world"}\n')
    fs.pipe("/cfg/mix.yaml", yaml.safe_dump({"a": {"file_name": "data/a.jsonl", "converter": "text"}}).encode())
    assert list(open_source("memory://cfg/mix.yaml")) == [{"text": "hello"}, {"text": "world"}]


def test_hub_entry_reads_a_local_repository_with_load_dataset(tmp_path):
    repo = tmp_path / "repo"
    (repo / "data").mkdir(parents=True)
    (repo / "data" / "train.jsonl").write_text('{"text": "a"}\n{"text": "b"}\n')
    (repo / "README.md").write_text("---\nconfigs:\n- config_name: default\n  data_files: data/*.jsonl\n---\n")
    info = tmp_path / "info.yaml"
    info.write_text(yaml.safe_dump({"r": {"path": str(repo), "source": "hf", "converter": "text"}}))
    assert list(open_source(info)) == [{"text": "a"}, {"text": "b"}]
