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

``<｜im▁start｜>``/``<｜im▁end｜>`` stand for the start/end control tokens of the tokenizer
(``<|im_start|>``/``<|im_end|>`` for Qwen-style vocabularies) and ``<eos>`` for its eos token:
markers.py resolves them, and refuses a tokenizer that has none unless ``text_markers=True``.

The tools block goes where the converters put it: inside the system message, after its text (a
system message holding only tools renders only the tools block). The ``template`` strategy
(template_strategy.py) renders the tokenizer's own Jinja chat template instead.
"""

from __future__ import annotations

import copy
from abc import ABC, abstractmethod
from collections.abc import Sequence

import numpy as np

from pipeline_core.chat.markers import chatml_markers, eos_marker
from pipeline_core.chat.pieces import Piece
from pipeline_core.chat.turns import WRAPPED, BlockWrappers, TurnFormat, Wrap
from pipeline_core.converters.media import MEDIA_KINDS
from pipeline_core.converters.sample import Message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.ragged import Ragged, concat_ragged, tile_rows
from pipeline_core.tokenizer.auto import AutoTokenizer

MEDIA_TYPES = tuple(kind.block_type for kind in MEDIA_KINDS)
BLOCKS = BlockWrappers()


class PromptStrategy(ABC):
    """Format tokens around query and response. Subclasses set the four runs in __init__."""

    trained_roles: frozenset[str] = frozenset({"assistant"})

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

    def training_roles(self, roles: frozenset[str]) -> PromptStrategy:
        """A copy whose rendered targets are the turns of ``roles`` (a processor's train_roles);
        the strategy itself is unchanged. Only the assistant role, unless a subclass knows more."""
        if roles == self.trained_roles:
            return self
        if roles != frozenset({"assistant"}):
            raise ConfigError(f"the {self.name} strategy trains assistant turns only; train_roles={sorted(roles)}")
        return self

    def render_samples(self, messages: list[Message]) -> list[list[Piece]]:
        """The samples of one conversation: one (the template strategy may give one per turn)."""
        return [self.render_messages(messages)]

    def render_samples_batch(self, conversations: list[list[Message]]) -> list[list[list[Piece]] | RowError]:
        """``render_samples`` of each conversation, or the RowError it raised (a strategy may batch the work)."""
        out: list[list[list[Piece]] | RowError] = []
        for messages in conversations:
            try:
                out.append(self.render_samples(messages))
            except RowError as e:
                out.append(e)
        return out

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
        return {**roles, **self.turns.blocks.format_strings()}


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
