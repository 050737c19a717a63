"""Prompt strategies: the format tokens wrapped around a query and its response, or a conversation.

A strategy is four token runs, encoded once at construction::

    prompt   = prompt_prefix + query + prompt_suffix      (loss off)
    response = response + response_suffix                (loss on)

``assemble_prompt`` / ``assemble_response`` apply them to one sample; the ``*_batch`` forms apply
them to a whole Ragged batch with numpy.

``render_messages`` renders a whole v1 conversation (converters/sample.py) as pieces (pieces.py),
which is the path the processors take. A strategy made only of the runs renders user and
assistant text turns by repeating them. ``chatml`` and ``alpaca`` use a role table (turn_format.py,
where the rendering of reasoning, tool calls and tool definitions is documented):

chatml, per role, ``start + content + end``::

    <｜im▁start｜>system\n{system text}\n\n<tools>\n{tools json}\n</tools><｜im▁end｜>\n
    <｜im▁start｜>user\n{text}<｜im▁end｜>\n
    <｜im▁start｜>assistant\n<think>\n{reasoning}\n</think>\n\n{text}\n<tool_call>\n{call json}\n</tool_call><｜im▁end｜>\n
    <｜im▁start｜>tool\n{tool result}<｜im▁end｜>\n

alpaca: system text first, then every turn; history turns are instruction/response pairs::

    {system text}\n\n### Instruction:\n{user}\n\n### Response:\n{assistant}<eos>### Instruction:\n...
    ### Observation:\n{tool result}\n\n   (tool turns)

The tools block goes where the converters put it: inside the system message, after its text (a
system message holding only tools renders only the tools block). The ``template`` strategy
(template_strategy.py) renders the tokenizer's own Jinja chat template instead.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from pipeline_core.chat.pieces import Piece
from pipeline_core.chat.turns import WRAPPED, BlockWrappers, TurnFormat, Wrap
from pipeline_core.converters.media import MEDIA_KINDS
from pipeline_core.converters.sample import Message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.ragged import Ragged, concat_ragged, tile_rows
from pipeline_core.tokenizer.auto import EOS_TOKEN, AutoTokenizer

MEDIA_TYPES = tuple(kind.block_type for kind in MEDIA_KINDS)
BLOCKS = BlockWrappers()


class PromptStrategy(ABC):
    """Format tokens around query and response. Subclasses set the four runs in __init__."""

    def __init__(self, tokenizer: AutoTokenizer) -> None:
        self.tokenizer = tokenizer
        self.prompt_prefix = np.zeros(0, dtype=np.int32)
        self.prompt_suffix = np.zeros(0, dtype=np.int32)
        self.response_suffix = np.zeros(0, dtype=np.int32)

    @property
    @abstractmethod
    def name(self) -> str: ...

    @abstractmethod
    def format_strings(self) -> dict[str, str]:
        """The strategy's parameters as written, for output metadata."""

    def _encode(self, text: str) -> np.ndarray:
        return np.asarray(self.tokenizer.encode_markup(text), dtype=np.int32)

    def assemble_prompt(self, query_tokens: Sequence[int]) -> list[int]:
        return [*self.prompt_prefix.tolist(), *query_tokens, *self.prompt_suffix.tolist()]

    def assemble_response(self, response_tokens: Sequence[int]) -> list[int]:
        return [*response_tokens, *self.response_suffix.tolist()]

    def assemble_prompt_batch(self, queries: Ragged) -> Ragged:
        n = len(queries)
        return concat_ragged([tile_rows(self.prompt_prefix, n), queries, tile_rows(self.prompt_suffix, n)])

    def assemble_response_batch(self, responses: Ragged) -> Ragged:
        return concat_ragged([responses, tile_rows(self.response_suffix, len(responses))])

    def render_messages(self, messages: list[Message]) -> list[Piece]:
        """The conversation as pieces; by default user/assistant text turns built from the runs."""
        pieces: list[Piece] = []
        for i, m in enumerate(messages):
            text = _plain_text(m, i, self.name)
            if m["role"] == "user":
                pieces += [Piece(ids=self.prompt_prefix, message=i), Piece(text, message=i)]
                pieces.append(Piece(ids=self.prompt_suffix, message=i))
            elif m["role"] == "assistant":
                pieces += [Piece(text, message=i, target=True), Piece(ids=self.response_suffix, message=i, target=True)]
            else:
                raise RowError(
                    "unsupported_role",
                    f"the {self.name} strategy only renders user/assistant turns, not {m['role']!r}; "
                    "use the chatml, alpaca or template strategy",
                    f"messages[{i}].role",
                )
        return pieces


def _plain_text(message: Message, i: int, strategy: str) -> str:
    for j, part in enumerate(message["content"]):
        if part["type"] != "text" and part["type"] not in MEDIA_TYPES:
            raise RowError(
                f"unsupported_content:{part['type']}",
                f"the {strategy} strategy renders text only; use chatml, alpaca or template for {part['type']} blocks",
                f"messages[{i}].content[{j}]",
            )
    return "".join(p["value"] for p in message["content"] if p["type"] == "text")


class TurnStrategy(PromptStrategy):
    """A strategy rendering conversations through a role table (turn_format.py)."""

    def _set_turns(self, roles: dict[str, Wrap], blocks: BlockWrappers) -> None:
        self.turns = TurnFormat(roles, blocks, self.tokenizer.encode_markup, self.name)

    def render_messages(self, messages: list[Message]) -> list[Piece]:
        return self.turns.render(messages)

    def render_text(self, messages: list[Message]) -> str:
        return self.turns.render_text(messages)

    def format_strings(self) -> dict[str, str]:
        roles = {f"{r}_{end}": getattr(w, end) for r, w in self.turns.roles.items() for end in ("start", "end")}
        return {**roles, **self.turns.blocks.format_strings()}


def _blocks(*starts_and_ends: str) -> BlockWrappers:
    """BlockWrappers from (reasoning start, end, tool_calls start, end, tools start, end)."""
    s = starts_and_ends
    return BlockWrappers(Wrap(s[0], s[1]), Wrap(s[2], s[3]), Wrap(s[4], s[5]))


class ChatMLStrategy(TurnStrategy):
    """ChatML turns: ``<im_start>role\n`` + content + ``<im_end>\n`` for system, user and assistant.

    The markers are format tokens (encoded with ``encode_markup``); the assistant's content and its
    end marker are the trained span. Every marker is a constructor argument, so another ChatML-like
    format needs no subclass.
    """

    def __init__(
        self,
        tokenizer: AutoTokenizer,
        user_start: str = "<｜im▁start｜>user\n",
        user_end: str = "<｜im▁end｜>\n",
        assistant_start: str = "<｜im▁start｜>assistant\n",
        assistant_end: str = "<｜im▁end｜>\n",
        system_start: str = "<｜im▁start｜>system\n",
        system_end: str = "<｜im▁end｜>\n",
        tool_start: str = "<｜im▁start｜>tool\n",
        tool_end: str = "<｜im▁end｜>\n",
        reasoning_start: str = BLOCKS.reasoning.start,
        reasoning_end: str = BLOCKS.reasoning.end,
        tool_calls_start: str = BLOCKS.tool_calls.start,
        tool_calls_end: str = BLOCKS.tool_calls.end,
        tools_start: str = BLOCKS.tools.start,
        tools_end: str = BLOCKS.tools.end,
    ) -> None:
        super().__init__(tokenizer)
        self.user_start, self.user_end = user_start, user_end
        self.assistant_start, self.assistant_end = assistant_start, assistant_end
        self.prompt_prefix = self._encode(user_start)
        self.prompt_suffix = self._encode(user_end + assistant_start)
        self.response_suffix = self._encode(assistant_end)
        roles = {
            "system": Wrap(system_start, system_end),
            "user": Wrap(user_start, user_end),
            "assistant": Wrap(assistant_start, assistant_end),
            "tool": Wrap(tool_start, tool_end),
        }
        blocks = _blocks(reasoning_start, reasoning_end, tool_calls_start, tool_calls_end, tools_start, tools_end)
        self._set_turns(roles, blocks)

    @property
    def name(self) -> str:
        return "chatml"


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
        response_suffix: str = EOS_TOKEN,
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
    ) -> None:
        super().__init__(tokenizer)
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
        }


class StrategyFactory:
    """The registry of prompt strategies: ``StrategyFactory.create("chatml", tokenizer, **kwargs)``.

    Built in: ``chatml``, ``alpaca`` and ``template`` (the tokenizer's own chat template). An unknown
    name or a wrong keyword is a ``ConfigError`` listing what is registered; register another with
    ``@StrategyFactory.register("name")`` on a ``PromptStrategy`` subclass.
    """

    _registry: dict[str, type[PromptStrategy]] = {}

    @classmethod
    def register(cls, name: str, strategy_cls: type[PromptStrategy] | None = None):
        """Register a strategy class; usable directly or as a class decorator."""

        def add(klass: type[PromptStrategy]) -> type[PromptStrategy]:
            cls._registry[name] = klass
            return klass

        return add(strategy_cls) if strategy_cls is not None else add

    @classmethod
    def create(cls, name: str, tokenizer: AutoTokenizer, **kwargs) -> PromptStrategy:
        if name not in cls._registry:
            raise ConfigError(f"unknown strategy {name!r}; registered strategies: {', '.join(sorted(cls._registry))}")
        try:
            return cls._registry[name](tokenizer, **kwargs)
        except TypeError as e:
            raise ConfigError(f"strategy {name!r}: {e}") from e

    @classmethod
    def names(cls) -> list[str]:
        return sorted(cls._registry)


StrategyFactory.register("chatml", ChatMLStrategy)
StrategyFactory.register("alpaca", AlpacaStrategy)
