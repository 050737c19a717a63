"""The mask controls as YAML fields: passed to the processor only when set, refused on the wrong processor."""

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
