import pytest

from pipeline_core import AlpacaStrategy, ChatMLStrategy, ConfigError, PromptStrategy, StrategyFactory
from pipeline_core.formats.ragged import Ragged


def test_chatml_tokens_are_single_special_ids(trained):
    s = StrategyFactory.create("chatml", trained)
    im_start, im_end = trained.token_to_id("<｜im▁start｜>"), trained.token_to_id("<｜im▁end｜>")
    q = trained.encode("question")
    prompt = s.assemble_prompt(q)
    assert prompt == [
        im_start,
        *trained.encode("user\n"),
        *q,
        im_end,
        *trained.encode("\n"),
        im_start,
        *trained.encode("assistant\n"),
    ]
    assert s.assemble_response([7, 8]) == [7, 8, im_end, *trained.encode("\n")]


def test_alpaca_format(trained):
    s = StrategyFactory.create("alpaca", trained)
    assert trained.decode(s.assemble_prompt(trained.encode("Do it"))) == "### Instruction:\nDo it\n\n### Response:\n"
    assert trained.decode(s.assemble_response(trained.encode("Done"))) == "Done<｜end▁of▁sentence｜>"


def test_parameters_are_constructor_arguments(trained):
    s = StrategyFactory.create("alpaca", trained, instruction_start="Q: ", instruction_end="\n", response_start="A: ")
    assert trained.decode(s.assemble_prompt(trained.encode("x"))) == "Q: x\nA: "
    assert s.format_strings()["instruction_start"] == "Q: "


def test_batch_assembly_equals_single(trained):
    s = ChatMLStrategy(trained)
    texts = ["a", "bb cc", "", "long text " * 20]
    queries = Ragged.from_lists([trained.encode(t) for t in texts])
    batch = s.assemble_prompt_batch(queries)
    assert batch.to_lists() == [s.assemble_prompt(trained.encode(t)) for t in texts]
    responses = s.assemble_response_batch(queries)
    assert responses.to_lists() == [s.assemble_response(trained.encode(t)) for t in texts]


def test_unknown_strategy_lists_registered(trained):
    with pytest.raises(ConfigError, match="alpaca, chatml"):
        StrategyFactory.create("vicuna", trained)


def test_register_custom_strategy(trained):
    @StrategyFactory.register("plain")
    class Plain(PromptStrategy):
        def __init__(self, tokenizer, sep: str = " => "):
            super().__init__(tokenizer)
            self.sep = sep
            self.prompt_suffix = self._encode(sep)

        @property
        def name(self):
            return "plain"

        def format_strings(self):
            return {"sep": self.sep}

    s = StrategyFactory.create("plain", trained, sep=" -> ")
    assert trained.decode(s.assemble_prompt(trained.encode("a"))) == "a -> "
    assert isinstance(StrategyFactory.create("alpaca", trained), AlpacaStrategy)
