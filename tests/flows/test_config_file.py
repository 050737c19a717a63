"""A run config that cannot run names what is wrong and the fix (no flow runs, nothing is written)."""

from __future__ import annotations

import pytest
import yaml

from flows.config_file import ConfigFileError, load_config

CACHE = {"input": "/data/jsonl", "output": "/data/h5", "tokenizer": {"path": "/tok"}}


def write(tmp_path, config) -> str:
    path = tmp_path / "run.yaml"
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return str(path)


def test_a_one_stage_section_or_top_level_keys_load_the_same(tmp_path):
    _, top = load_config(write(tmp_path, {"flow": "cache", **CACHE, "pack_size": 64}))
    _, section = load_config(write(tmp_path, {"flow": "cache", "cache": {**CACHE, "pack_size": 64}}))
    assert top == section and section.pack_size == 64


def test_a_key_beside_the_section_is_named_not_reported_as_missing_fields(tmp_path):
    path = write(tmp_path, {"flow": "cache", "cache": CACHE, "pack_size": 64})
    with pytest.raises(ConfigFileError) as e:
        load_config(path)
    assert str(e.value) == (
        f"{path}: a cache config holds its parameters at the top level or all in its 'cache:' section, "
        "not both: move pack_size into the section"
    )


def test_a_pipeline_with_one_stage_says_how_to_run_that_stage_alone(tmp_path):
    with pytest.raises(ConfigFileError) as e:
        load_config(write(tmp_path, {"cache": CACHE}))
    assert "export: Field required" in str(e.value)
    assert str(e.value).endswith("(to run the cache stage alone, add 'flow: cache')")
    with pytest.raises(ConfigFileError) as e:
        stages = {"export": {"source": "x", "output": "/data/jsonl"}, "cache": CACHE}
        load_config(write(tmp_path, {**stages, "pack_sise": 1}))
    assert "pack_sise: Extra inputs are not permitted" in str(e.value) and "alone" not in str(e.value)
