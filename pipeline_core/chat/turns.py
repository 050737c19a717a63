"""Role-table rendering: each message is ``start + blocks + end`` of its role, as runs of pieces.

A ``TurnFormat`` holds, per role, the format strings written before and after a message, and the
wrappers of the non-text content blocks. Rendering a v1 message (see converters/sample.py)::

    role.start | block, block, ... | role.end

    text        the value as is
    reasoning   reasoning.start + value + reasoning.end           e.g. <think>\\n ... \\n</think>\\n\\n
    tool_calls  tool_calls.start + value + tool_calls.end         e.g. <tool_call>\\n{json}\\n</tool_call>
    tools       tools.start + value + tools.end                   e.g. <tools>\\n[json]\\n</tools>
    media       nothing: the references are kept apart (processors/media.py)

A tools or tool_calls block that follows non-empty content of the same message starts on a new
line ("\\n" before its wrapper). Values are user text (encoded as text, so data cannot inject
control tokens); role strings and wrappers are markup. An assistant message's blocks and end are
its training target; its start and every other message are not (``trained_roles`` adds roles).

Neighbouring runs of one kind and span are joined before encoding: markup is encoded as written
in one piece (``user_end + assistant_start`` is one string, exactly a single-turn prompt suffix)
and neighbouring texts encode as one text. The result depends only on the conversation's
structure (roles, block types, which values are empty), so it is planned once per structure
and cached, markup pieces included: rendering a row is then filling in its texts.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass

import numpy as np

from pipeline_core.chat.pieces import Piece
from pipeline_core.converters.sample import Message
from pipeline_core.errors import RowError

NEWLINE_BEFORE = ("tools", "tool_calls")
WRAPPED = ("reasoning", "tool_calls", "tools")
MAX_PLANS = 4096  # distinct conversation structures kept; the cache restarts when full

Structure = tuple  # flat, per message: role, number of blocks, then type and empty per block


@dataclass(frozen=True, slots=True)
class Wrap:
    start: str
    end: str


@dataclass(frozen=True, slots=True)
class BlockWrappers:
    reasoning: Wrap = Wrap("<think>\n", "\n</think>\n\n")
    tool_calls: Wrap = Wrap("<tool_call>\n", "\n</tool_call>")
    tools: Wrap = Wrap("<tools>\n", "\n</tools>")

    def format_strings(self) -> dict[str, str]:
        return {f"{name}_{end}": getattr(getattr(self, name), end) for name in WRAPPED for end in ("start", "end")}


@dataclass(frozen=True, slots=True)
class Run:
    """One step of a plan: markup (its string) or text (the (message, block) values it joins)."""

    markup: str = ""
    refs: tuple[tuple[int, int], ...] = ()
    message: int = -1
    target: bool = False

    def key(self) -> tuple:
        """Runs with equal keys are joined: same kind, same target, same owner when a target."""
        return (bool(self.refs), self.target, self.message if self.target else None)

    def join(self, other: Run) -> Run:
        return Run(self.markup + other.markup, self.refs + other.refs, self.message, self.target)


Plan = list[tuple[Run, Piece | None]]  # per run: its markup piece (shared by every row), None for text


def merge_runs(runs: Iterator[Run]) -> list[Run]:
    merged: list[Run] = []
    for run in runs:
        if not (run.markup or run.refs):
            continue
        if merged and merged[-1].key() == run.key():
            merged[-1] = merged[-1].join(run)
        else:
            merged.append(run)
    return merged


class TurnFormat:
    def __init__(
        self,
        roles: dict[str, Wrap],
        blocks: BlockWrappers,
        encode_markup: Callable[[str], list[int]],
        strategy_name: str,
        trained_roles: frozenset[str] = frozenset({"assistant"}),
    ) -> None:
        self.roles, self.blocks, self.strategy_name = roles, blocks, strategy_name
        self.trained_roles = trained_roles  # whose blocks and end are a target (the start never is)
        self._encode = encode_markup
        self._plans: dict[Structure, Plan] = {}

    def render(self, messages: list[Message]) -> list[Piece]:
        return [_text_piece(run, messages) if piece is None else piece for run, piece in self._plan(messages)]

    def render_text(self, messages: list[Message]) -> str:
        """The whole conversation as one string (what decoding the sequence gives)."""
        return "".join(run.markup or _text(run, messages) for run, _ in self._plan(messages))

    def _plan(self, messages: list[Message]) -> Plan:
        structure = _structure(messages)
        plan = self._plans.get(structure)
        if plan is None:
            plan = self._new_plan(messages)
            if len(self._plans) >= MAX_PLANS:
                self._plans.clear()
            self._plans[structure] = plan
        return plan

    def _new_plan(self, messages: list[Message]) -> Plan:
        runs = merge_runs(run for i, m in enumerate(messages) for run in self._message_runs(i, m["role"], _blocks(m)))
        return [(r, None if r.refs else self._markup_piece(r)) for r in runs]

    def _markup_piece(self, run: Run) -> Piece:
        ids = np.asarray(self._encode(run.markup), dtype=np.int32)
        return Piece(ids=ids, message=run.message, target=run.target)

    def _message_runs(self, i: int, role: str, blocks: tuple[tuple[str, bool], ...]) -> Iterator[Run]:
        wrap = self._role(i, role)
        target = role in self.trained_roles
        yield Run(wrap.start, message=i)
        written = False
        for j, (kind, empty) in enumerate(blocks):
            if kind == "text" or kind in WRAPPED:
                yield from self._block(i, j, kind, empty, written, target)
                written = written or not empty or kind != "text"
        yield Run(wrap.end, message=i, target=target)

    def _block(self, i: int, j: int, kind: str, empty: bool, after_text: bool, target: bool) -> Iterator[Run]:
        value = Run(refs=() if empty else ((i, j),), message=i, target=target)
        if kind == "text":
            yield value
            return
        wrap: Wrap = getattr(self.blocks, kind)
        lead = "\n" if after_text and kind in NEWLINE_BEFORE else ""
        yield from (Run(lead + wrap.start, message=i, target=target), value, Run(wrap.end, message=i, target=target))

    def _role(self, i: int, role: str) -> Wrap:
        if role not in self.roles:
            raise RowError(
                "unsupported_role",
                f"the {self.strategy_name} strategy has no format for {role!r} messages; "
                f"it renders {'/'.join(self.roles)}",
                f"messages[{i}].role",
            )
        return self.roles[role]


def _structure(messages: list[Message]) -> Structure:
    """What a plan depends on, as one flat tuple (cheaper to build and hash than nested ones)."""
    key: list = []
    for m in messages:
        content = m["content"]
        key += (m["role"], len(content))
        for b in content:
            key += (b["type"], not b["value"])
    return tuple(key)


def _blocks(message: Message) -> tuple[tuple[str, bool], ...]:
    return tuple((b["type"], not b["value"]) for b in message["content"])


def _text(run: Run, messages: list[Message]) -> str:
    if len(run.refs) == 1:
        i, j = run.refs[0]
        return messages[i]["content"][j]["value"]
    return "".join(messages[i]["content"][j]["value"] for i, j in run.refs)


def _text_piece(run: Run, messages: list[Message]) -> Piece:
    return Piece(_text(run, messages), message=run.message, target=run.target)
