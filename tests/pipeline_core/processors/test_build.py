"""Building a processor from plain settings: nothing the user set is dropped on the way."""

from __future__ import annotations

import pytest

from pipeline_core.errors import ConfigError
from pipeline_core.processors.build import ProcessorSpec, build_processor


def spec(processor: str, strategy: str | None, strategy_kwargs: dict) -> ProcessorSpec:
    return ProcessorSpec(processor, strategy, strategy_kwargs)


def test_strategy_kwargs_without_a_strategy_reach_the_default_strategy(gpt2):
    # GPT-2 has no ChatML control tokens: without the kwargs chatml is refused, with them it builds
    with pytest.raises(ConfigError, match="text_markers=True"):
        build_processor(spec("sft", None, {}), gpt2)
    built = build_processor(spec("sft", None, {"text_markers": True}), gpt2)
    text = gpt2.decode(built.process({"query": "hi", "response": "yo"})["sequence"].tolist())
    assert text.startswith("<｜im▁start｜>user\nhi<｜im▁end｜>")  # the design's markers, as plain text


def test_strategy_kwargs_for_a_processor_without_strategy_are_refused(gpt2):
    with pytest.raises(ConfigError, match="takes no strategy"):
        build_processor(spec("pt", None, {"text_markers": True}), gpt2)
