"""The mask controls as YAML fields, UI form fields, cache-key material and file attributes: passed to the
processor only when set, refused on the wrong processor."""

import pytest
from pydantic import ValidationError

from flows.params import CacheParams

BASE = {"input": "in.jsonl", "output": "out", "tokenizer": {"path": "tok"}}


def test_controls_reach_the_processor_kwargs_only_when_set():
    assert CacheParams(**BASE, processor="sft").processor_spec().processor_kwargs == {}
    sft = CacheParams(**BASE, processor="sft", train_on_prompt=True, processor_kwargs={"train_on": "last"})
    assert sft.processor_spec().processor_kwargs == {"train_on": "last", "train_on_prompt": True}
    roles = CacheParams(**BASE, processor="sft", train_roles=["user", "assistant"]).processor_spec()
    assert roles.processor_kwargs == {"train_roles": ["user", "assistant"]}
    pt = CacheParams(**BASE, processor="pt", add_bos=True, add_eos=False)
    assert pt.processor_spec().processor_kwargs == {"add_bos": True, "add_eos": False}


@pytest.mark.parametrize("field, value", [("train_on_eos", "none"), ("add_bos", True)])
def test_a_control_of_another_processor_is_refused(field, value):
    processor = "pt" if field.startswith("train") else "sft"
    with pytest.raises(ValidationError, match=f"{field} applies to the"):
        CacheParams(**BASE, processor=processor, **{field: value})


# each control: (processor, family tokenizer that can honour it, field, a non-default value)
CONTROLS = [
    ("sft", "qwen2.5", "train_on_prompt", True),
    ("sft", "qwen2.5", "train_on_eos", "none"),
    ("sft", "qwen2.5", "train_roles", ["user", "assistant"]),
    ("pt", "llama3.1", "add_bos", True),
    ("pt", "llama3.1", "add_eos", False),
]
# what the Prefect UI's form shows for each, written out by hand
FORM = {
    "train_on_prompt": {"type": "boolean", "default": False},
    "train_on_eos": {"type": "string", "enum": ["turn", "last", "none"], "default": "turn"},
    "train_roles": {"type": "array", "default": ["assistant"]},
    "add_bos": {"type": "boolean", "default": False},
    "add_eos": {"type": "boolean", "default": True},
}


def test_each_control_is_a_field_of_the_ui_form():
    from prefect.utilities.callables import parameter_schema

    from flows.cache_flow import cache_flow

    schema = parameter_schema(cache_flow.fn).model_dump_for_openapi()
    fields = schema["definitions"]["CacheParams"]["properties"]
    for name, expected in FORM.items():
        assert {k: fields[name].get(k) for k in expected} == expected, name
    assert fields["train_roles"]["items"]["enum"] == ["system", "user", "assistant", "tool"]


def flow_params(tmp_path, processor, family, **control) -> CacheParams:
    import json

    from tests.pipeline_core.chat.families import family_folder

    chunk = tmp_path / "in" / "train_chunk_0.jsonl"
    if not chunk.exists():
        chunk.parent.mkdir()
        rows = [{"text": f"Document {i}.", "query": f"Q{i}?", "response": f"A{i}."} for i in range(8)]
        chunk.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    folder = family_folder(family, tmp_path / family)
    return CacheParams(
        input=str(chunk), output=str(tmp_path / "out"), tokenizer={"path": str(folder)}, processor=processor, **control
    )


@pytest.mark.parametrize("processor, family, field, value", CONTROLS, ids=[c[2] for c in CONTROLS])
def test_each_control_keys_the_cache_and_is_recorded_in_the_file(tmp_path, processor, family, field, value):
    from flows.cache_flow import cache_flow, make_job
    from pipeline_core import read_attrs
    from pipeline_core.errors import ConfigError
    from tasks.keys import digest

    default = flow_params(tmp_path, processor, family)
    changed = flow_params(tmp_path, processor, family, **{field: value})
    assert digest(make_job(changed).settings()) != digest(make_job(default).settings())  # the cache key
    cache_flow(default)
    assert field not in read_attrs(str(tmp_path / "out" / "train_chunk_0.h5"))  # defaults: keys as before
    with pytest.raises(ConfigError, match="other settings"):  # the folder's settings
        cache_flow(changed)
    assert cache_flow(changed.model_copy(update={"overwrite": True}))["cached"] == [False]
    recorded = read_attrs(str(tmp_path / "out" / "train_chunk_0.h5"))[field]  # the file's attributes
    assert recorded == (sorted(value) if isinstance(value, list) else value)
