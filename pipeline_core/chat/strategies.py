"""The ``chatml`` and ``alpaca`` prompt strategies (the base, ``PromptStrategy``, is in prompt.py).

Both render a v1 conversation through a role table (turns.py, where the rendering of reasoning,
tool calls and tool definitions is documented):

chatml, per role, ``start + content + end``::

    <｜im▁start｜>system\n{system text}\n<tools>\n{tools json}\n</tools><｜im▁end｜>\n
    <｜im▁start｜>user\n{text}<｜im▁end｜>\n
    <｜im▁start｜>assistant\n<think>\n{reasoning}\n</think>\n\n{text}\n<tool_call>\n{call json}\n</tool_call><｜im▁end｜>\n
    <｜im▁start｜>tool\n{tool result}<｜im▁end｜>\n

alpaca: system text first, then every turn; history turns are instruction/response pairs::

    {system text}\n\n### Instruction:\n{user}\n\n### Response:\n{assistant}<eos>### Instruction:\n...
    ### Observation:\n{tool result}\n\n   (tool turns)

``<｜im▁start｜>``/``<｜im▁end｜>`` stand for the start/end control tokens of the tokenizer
(``<|im_start|>``/``<|im_end|>`` for Qwen-style vocabularies) and ``<eos>`` for its eos token:
markers.py resolves them, and refuses a tokenizer that has none unless ``text_markers=True``.

The tools block goes where the converters put it: inside the system message, after its text (a
system message holding only tools renders only the tools block). The ``template`` strategy
(template.py) renders the tokenizer's own Jinja chat template instead.
"""

from __future__ import annotations

import copy

from pipeline_core.chat.markers import chatml_markers, eos_marker
from pipeline_core.chat.pieces import Piece
from pipeline_core.chat.prompt import MESSAGE_FIELDS_RULE, PromptStrategy
from pipeline_core.chat.registry import StrategyFactory
from pipeline_core.chat.turns import WRAPPED, BlockWrappers, TurnFormat, Wrap
from pipeline_core.converters.sample import Message
from pipeline_core.tokenizer.auto import AutoTokenizer

BLOCKS = BlockWrappers()


class TurnStrategy(PromptStrategy):
    """A strategy rendering conversations through a role table (turn_format.py)."""

    def _set_turns(self, roles: dict[str, Wrap], blocks: BlockWrappers) -> None:
        self.turns = TurnFormat(roles, blocks, self.tokenizer.encode_markup, self.name, self.trained_roles)

    def training_roles(self, roles: frozenset[str]) -> PromptStrategy:
        if roles == self.trained_roles:
            return self
        other = copy.copy(self)
        other.trained_roles = roles
        other._set_turns(self.turns.roles, self.turns.blocks)
        return other

    def render_messages(self, messages: list[Message]) -> list[Piece]:
        return self.turns.render(messages)

    def render_text(self, messages: list[Message]) -> str:
        return self.turns.render_text(messages)

    def format_strings(self) -> dict[str, str]:
        roles = {f"{r}_{end}": getattr(w, end) for r, w in self.turns.roles.items() for end in ("start", "end")}
        return {**roles, **self.turns.blocks.format_strings(), **MESSAGE_FIELDS_RULE}


def _blocks(*starts_and_ends: str) -> BlockWrappers:
    """BlockWrappers from (reasoning start, end, tool_calls start, end, tools start, end)."""
    s = starts_and_ends
    return BlockWrappers(Wrap(s[0], s[1]), Wrap(s[2], s[3]), Wrap(s[4], s[5]))


class ChatMLStrategy(TurnStrategy):
    """ChatML turns: ``<im_start>role\n`` + content + ``<im_end>\n`` for system, user and assistant.

    Markers left as None are built from the start/end control tokens this tokenizer has
    (``<|im_start|>``/``<|im_end|>``, or the design's full-width spelling; see ``markers``), each
    one special id; ``text_markers=True`` accepts the full-width spelling as plain text when the
    tokenizer has neither. The assistant's content and its end marker are the trained span.
    """

    def __init__(
        self,
        tokenizer: AutoTokenizer,
        user_start: str | None = None,
        user_end: str | None = None,
        assistant_start: str | None = None,
        assistant_end: str | None = None,
        system_start: str | None = None,
        system_end: str | None = None,
        tool_start: str | None = None,
        tool_end: str | None = None,
        reasoning_start: str = BLOCKS.reasoning.start,
        reasoning_end: str = BLOCKS.reasoning.end,
        tool_calls_start: str = BLOCKS.tool_calls.start,
        tool_calls_end: str = BLOCKS.tool_calls.end,
        tools_start: str = BLOCKS.tools.start,
        tools_end: str = BLOCKS.tools.end,
        text_markers: bool = False,
    ) -> None:
        super().__init__(tokenizer)
        given = {"user": (user_start, user_end), "assistant": (assistant_start, assistant_end)}
        given |= {"system": (system_start, system_end), "tool": (tool_start, tool_end)}
        roles = _chatml_roles(tokenizer, given, text_markers)
        self.user_start, self.user_end = roles["user"].start, roles["user"].end
        self.assistant_start, self.assistant_end = roles["assistant"].start, roles["assistant"].end
        self.prompt_prefix = self._encode(self.user_start)
        self.prompt_suffix = self._encode(self.user_end + self.assistant_start)
        self.response_suffix = self._encode(self.assistant_end)
        blocks = _blocks(reasoning_start, reasoning_end, tool_calls_start, tool_calls_end, tools_start, tools_end)
        self._set_turns(roles, blocks)

    @property
    def name(self) -> str:
        return "chatml"


def _chatml_roles(
    tokenizer: AutoTokenizer, given: dict[str, tuple[str | None, str | None]], text_markers: bool
) -> dict[str, Wrap]:
    """Each role's markers: as given, else from the tokenizer's start/end tokens (resolved only when needed)."""
    if all(v is not None for pair in given.values() for v in pair):
        return {role: Wrap(*pair) for role, pair in given.items()}
    start, end = chatml_markers(tokenizer, text_markers)
    return {
        role: Wrap(s if s is not None else f"{start}{role}\n", e if e is not None else f"{end}\n")
        for role, (s, e) in given.items()
    }


class AlpacaStrategy(TurnStrategy):
    """Alpaca's layout: ``### Instruction:`` / ``### Response:`` headers, the response ending in ``response_suffix``.

    The trained span is the response text and its suffix (the tokenizer's eos by default). The
    instruction's ``input`` column, when present, is joined to the instruction by the converter.
    """

    def __init__(
        self,
        tokenizer: AutoTokenizer,
        instruction_start: str = "### Instruction:\n",
        instruction_end: str = "\n\n",
        response_start: str = "### Response:\n",
        response_suffix: str | None = None,
        system_start: str = "",
        system_end: str = "\n\n",
        tool_start: str = "### Observation:\n",
        tool_end: str = "\n\n",
        reasoning_start: str = BLOCKS.reasoning.start,
        reasoning_end: str = BLOCKS.reasoning.end,
        tool_calls_start: str = BLOCKS.tool_calls.start,
        tool_calls_end: str = BLOCKS.tool_calls.end,
        tools_start: str = BLOCKS.tools.start,
        tools_end: str = BLOCKS.tools.end,
        text_markers: bool = False,
    ) -> None:
        super().__init__(tokenizer)
        if response_suffix is None:  # the tokenizer's eos (markers.py)
            response_suffix = eos_marker(tokenizer, text_markers)
        self.instruction_start, self.instruction_end = instruction_start, instruction_end
        self.response_start, self.response_suffix_text = response_start, response_suffix
        self.prompt_prefix = self._encode(instruction_start)
        self.prompt_suffix = self._encode(instruction_end + response_start)
        self.response_suffix = self._encode(response_suffix)
        roles = {
            "system": Wrap(system_start, system_end),
            "user": Wrap(instruction_start, instruction_end),
            "assistant": Wrap(response_start, response_suffix),
            "tool": Wrap(tool_start, tool_end),
        }
        blocks = _blocks(reasoning_start, reasoning_end, tool_calls_start, tool_calls_end, tools_start, tools_end)
        self._set_turns(roles, blocks)

    @property
    def name(self) -> str:
        return "alpaca"

    def format_strings(self) -> dict[str, str]:
        return {
            "instruction_start": self.instruction_start,
            "instruction_end": self.instruction_end,
            "response_start": self.response_start,
            "response_suffix": self.response_suffix_text,
            **{k: v for k, v in super().format_strings().items() if k.startswith(("system_", "tool_", *WRAPPED))},
            **MESSAGE_FIELDS_RULE,
        }


StrategyFactory.register("chatml", ChatMLStrategy)
StrategyFactory.register("alpaca", AlpacaStrategy)
