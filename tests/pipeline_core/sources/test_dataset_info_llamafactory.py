"""LLaMA-Factory's dataset_info files as LLaMA-Factory reads them: entries parsed only when selected,
hub-only and ModelScope-only entries never fail a run that does not select them, v1's ``source``
default and ``dataset_dir``, and a dataset_info recognised by its content."""

from __future__ import annotations

import json
import logging
import re
import shutil
from pathlib import Path

import pytest
import yaml

from pipeline_core.errors import ConfigError
from pipeline_core.sources import open_source
from pipeline_core.sources.dataset_info import load_dataset_info
from pipeline_core.stages.export import export_source
from tests.conftest import load_json_or_jsonl

pytestmark = pytest.mark.usefixtures("hf_offline")

# Entries as LLaMA-Factory's full data/dataset_info.json has them beside the demo files' ones.
HUB_ENTRIES = {
    "alpaca_en": {"hf_hub_url": "llamafactory/alpaca_en", "ms_hub_url": "llamafactory/alpaca_en"},
    "deepctrl": {"ms_hub_url": "deepctrl/deepctrl-sft-data"},
    "alpaca_zh_om": {"om_hub_url": "HaM/alpaca_zh"},
    "belle_multiturn": {"script_url": "belle_multiturn", "formatting": "sharegpt"},
    "llava_1k": {"hf_hub_url": "BUAADreamer/llava-en-zh-2k", "subset": "en", "folder": "x", "formatting": "sharegpt"},
    "wiki_sampled": {"file_name": "wiki_demo.txt", "num_samples": 10, "columns": {"prompt": "text"}},
    "future_key": {"file_name": "a.json", "brand_new_key": 1},
}


@pytest.fixture
def full_info(llamafactory, tmp_path) -> Path:
    """A copy of the fixture folder whose dataset_info.json also holds hub-only and ModelScope-only entries."""
    data = tmp_path / "data"
    shutil.copytree(llamafactory, data)
    entries = {**json.loads((llamafactory / "dataset_info.json").read_text()), **HUB_ENTRIES}
    (data / "dataset_info.json").write_text(json.dumps(entries, indent=2))
    return data / "dataset_info.json"


def rows_of(llamafactory: Path, name: str) -> int:
    return len(load_json_or_jsonl(llamafactory / f"{name}.json"))


def test_selected_local_entries_export_and_the_others_never_fail(full_info, llamafactory, tmp_path, caplog):
    with caplog.at_level(logging.INFO, logger="pipeline_core.sources.open"):
        result = export_source(full_info, tmp_path / "out", datasets=["identity", "alpaca_en_demo"], seed=1)
    counts = {n: c.rows_taken for n, c in result.datasets.items()}
    assert counts == {"identity": rows_of(llamafactory, "identity"), "alpaca_en_demo": 999}
    assert sum(s.rows_out for s in result.chunks) == counts["identity"] + 999
    logged = caplog.text
    for name in ("deepctrl", "alpaca_zh_om", "belle_multiturn", "llava_1k", "wiki_sampled", "future_key"):
        assert repr(name) in logged  # listed with the reason, not fatal
    assert "alpaca_en'" not in logged.replace("alpaca_en_demo'", "")  # a hub entry h5pipe can load is not listed


def test_unselected_entries_are_not_even_parsed(full_info):
    info = load_dataset_info(str(full_info))
    assert [e.name for e in info.entries(["c4_demo"])] == ["c4_demo"]
    assert set(info.unusable()) == {
        "deepctrl",
        "alpaca_zh_om",
        "belle_multiturn",
        "llava_1k",
        "wiki_sampled",
        "future_key",
    }
    hub = info.entry("alpaca_en")
    assert (hub.hub, hub.location) == (
        True,
        "llamafactory/alpaca_en",
    )  # the HF url, as v0 picks without USE_MODELSCOPE_HUB


@pytest.mark.parametrize(
    ("name", "message"),
    [
        ("deepctrl", r"'deepctrl' is on ModelScope \('deepctrl/deepctrl-sft-data'\).*download it"),
        ("alpaca_zh_om", "is on Modelers"),
        ("belle_multiturn", "script_url"),
        ("llava_1k", "folder is not supported"),
        ("wiki_sampled", "num_samples is not supported"),
        ("future_key", r"unknown keys \['brand_new_key'\]"),
    ],
)
def test_a_selected_entry_that_cannot_load_is_a_clear_error(full_info, name, message):
    with pytest.raises(ConfigError, match=message):
        open_source(full_info, datasets=["identity", name])


def test_modelscope_when_the_environment_asks_for_it(full_info, monkeypatch):
    monkeypatch.setenv("USE_MODELSCOPE_HUB", "1")
    with pytest.raises(ConfigError, match="'alpaca_en' is on ModelScope"):
        open_source(full_info, datasets=["alpaca_en"])


def test_a_selected_hub_entry_is_refused_offline(full_info):
    with pytest.raises(ConnectionError, match="llamafactory/alpaca_en"):
        open_source(full_info, datasets=["alpaca_en"])


def test_no_selection_names_every_unusable_entry_and_how_to_select(full_info):
    with pytest.raises(ConfigError, match=r"6 of 13 entries cannot be loaded(.|\n)*--dataset a,b") as info:
        open_source(full_info)
    assert "deepctrl" in str(info.value) and "future_key" in str(info.value)


def test_dataset_dir_as_llamafactory_defines_it(full_info, llamafactory, tmp_path):
    """v0: file names resolve against dataset_dir (default: the file's folder), not the file's name."""
    elsewhere = tmp_path / "config" / "my_mix.json"  # not named dataset_info*: read by content
    elsewhere.parent.mkdir()
    shutil.copy(full_info, elsewhere)
    with pytest.raises(FileNotFoundError, match="identity.json"):
        open_source(elsewhere, datasets=["identity"])
    source = open_source(elsewhere, datasets=["identity"], dataset_dir=str(full_info.parent))
    assert source.num_rows == rows_of(llamafactory, "identity")
    with pytest.raises(ConfigError, match="dataset_dir only applies to a dataset_info"):
        open_source(full_info.parent / "c4_demo.jsonl", dataset_dir="x")


def write_v1_tree(root: Path, llamafactory: Path) -> Path:
    """LLaMA-Factory's layout: data/ beside the YAML, paths in it relative to the repository root."""
    (root / "data").mkdir(parents=True)
    for name in ("identity.json", "alpaca_en_demo.json"):
        shutil.copy(llamafactory / name, root / "data" / name)
    entries = {
        "identity": {"path": "data/identity.json", "source": "local", "converter": "alpaca"},
        "alpaca_en_demo": {"path": "data/alpaca_en_demo.json", "source": "local", "converter": "alpaca", "size": 500},
        "v1_sft_hub": {"path": "llamafactory/v1-sft-demo"},  # no source: v1 reads it from the hub
        "ms_demo": {"path": "llamafactory/v1-sft-demo", "source": "ms_hub"},
        "hf_demo": {"path": "llamafactory/v1-sft-demo", "source": "hf_hub", "split": "train"},
    }
    config = root / "data" / "v1_sft_demo.yaml"
    config.write_text(yaml.safe_dump(entries))
    return config


def test_v1_yaml_resolves_like_llamafactory(llamafactory, tmp_path, monkeypatch):
    config = write_v1_tree(tmp_path / "LLaMA-Factory", llamafactory)
    info = load_dataset_info(str(config))
    assert (info.entry("v1_sft_hub").hub, info.entry("hf_demo").hub) == (True, True)  # v1's default source
    with pytest.raises(ConfigError, match="ModelScope"):
        info.entry("ms_demo")
    selected = ["identity", "alpaca_en_demo"]
    with pytest.raises(ConfigError, match="relative to the working directory.*set dataset_dir"):
        open_source(config, datasets=selected)  # run from elsewhere: said, not guessed
    by_dir = open_source(config, datasets=selected, dataset_dir=str(tmp_path / "LLaMA-Factory"))
    monkeypatch.chdir(tmp_path / "LLaMA-Factory")  # where LLaMA-Factory runs
    result = export_source("data/v1_sft_demo.yaml", tmp_path / "out", datasets=selected)
    assert {n: c.rows_taken for n, c in result.datasets.items()} == {
        "identity": rows_of(llamafactory, "identity"),
        "alpaca_en_demo": 500,
    }
    assert by_dir.num_rows == result.chunks[0].rows_in + sum(s.rows_in for s in result.chunks[1:])
    with pytest.raises(ConnectionError, match="llamafactory/v1-sft-demo"):  # the hub entry, offline
        open_source("data/v1_sft_demo.yaml", datasets=["v1_sft_hub"])


@pytest.mark.parametrize(
    ("columns", "named"),
    [
        ({"prompt": "instruction", "query": "inp", "response": "output"}, "columns.query = 'inp'"),
        (
            {"prompt": "instruction", "response": "output", "system": "system_prompt"},
            "columns.system = 'system_prompt'",
        ),
        ({"prompt": "instruction", "response": "output", "images": "image"}, "columns.images = 'image'"),
    ],
)
def test_a_mapped_column_the_data_lacks_is_refused_naming_it(llamafactory, tmp_path, columns, named):
    """LLaMA-Factory fails on example[column]; read as missing, a misspelt column left every row
    without its input, system prompt or images, with no error."""
    shutil.copy(llamafactory / "alpaca_en_demo.json", tmp_path / "alpaca_en_demo.json")
    info = tmp_path / "dataset_info.json"
    info.write_text(json.dumps({"demo": {"file_name": "alpaca_en_demo.json", "columns": columns}}))
    with pytest.raises(
        ConfigError,
        match=rf"dataset 'demo': {re.escape(named)} not in .*alpaca_en_demo\.json \(its columns: \['input', 'instruction', 'output'\]\); fix the name",
    ):
        open_source(info)
    columns_there = {k: v for k, v in columns.items() if v in ("instruction", "output", "input")}
    info.write_text(json.dumps({"demo": {"file_name": "alpaca_en_demo.json", "columns": columns_there}}))
    assert open_source(info).num_rows == rows_of(llamafactory, "alpaca_en_demo")  # the named ones that exist pass


@pytest.mark.parametrize(
    ("entry", "fixture"),
    [
        (
            {"formatting": "sharegpt", "columns": {"messages": "conversations", "history": "hist"}},
            "glaive_toolcall_en_demo",
        ),
        (
            {"formatting": "sharegpt", "columns": {"messages": "conversations", "prompt": "instruction"}},
            "glaive_toolcall_en_demo",
        ),
        ({"columns": {"prompt": "instruction", "response": "output", "messages": "conversations"}}, "alpaca_en_demo"),
    ],
)
def test_a_named_role_the_formatting_never_reads_is_not_required(llamafactory, tmp_path, entry, fixture):
    """LLaMA-Factory's sharegpt parser never reads prompt/history, nor alpaca's the conversation: an
    entry naming them for columns the data lacks loads there, and was refused here."""
    shutil.copy(llamafactory / f"{fixture}.json", tmp_path / f"{fixture}.json")
    info = tmp_path / "dataset_info.json"
    info.write_text(json.dumps({"demo": {"file_name": f"{fixture}.json", **entry}}))
    assert open_source(info).num_rows == rows_of(llamafactory, fixture)
