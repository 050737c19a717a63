"""Frames: a chat template rendered once per conversation *shape*, then filled with each row's contents.

A shape is the roles of a conversation's template messages and which contents are empty, for
messages holding only ``role`` and ``content`` and no tools. Its frame is compiled by rendering the
template (the whole conversation, and for each assistant turn ``k`` the prefix renders
``messages[:k]`` with the generation prompt and ``messages[:k+1]``) with unique sentinel strings
as the non-empty contents, traced (tokenizer/template_trace.py)::

    frame  = literal_0, slot_0, literal_1, slot_1, ..., literal_m     (slot_i: a content slot)
    text   = literal_0 + content[slot_0] + literal_1 + ... + literal_m

Slot k < n is message k's content (n: the shape's messages). A string method the template calls
on a content with literal arguments (Qwen3's ``content.lstrip('\n')``, Llama's ``|trim``) hands it
the sentinel of a new slot n, n+1...: a *derivation* (tokenizer/template_reads.py), which a row
computes from its content with the same ``str`` method, so slot n may be ``content[1].lstrip('\n')``.

A frame is used only when, for every one of those renders,

- the template read no content (only wrote, concatenated or truth-tested them, derived contents
  from them, or asked them questions a row can answer again: *guards*), so its control flow is
  the same for every row of the shape whose contents answer the guards as the sentinels did;
- every sentinel that appears is written verbatim (no escaping or JSON), and no stray sentinel
  character remains;
- a second render with a different sentinel set gives the same literals, slots, guards and
  derivations;
- when each assistant turn's prefix renders extend each other and the whole render, a row's spans
  come from the contents' lengths alone (``render``). When they do not for every filling (the
  template rewrites history, as Qwen3 drops earlier turns' reasoning), the frame ``rewrites``:
  ``texts`` fills every render, and the strategy decides on those texts exactly as on Jinja's
  (chat/template.py: the same prefix test, then the ``rewritten`` handling).

A row is filled into its shape's frame only when its contents and derived contents pass every
guard of every render (``ShapeFrame.admits``: e.g. Qwen3's ``'</think>' in content`` is False); a
row that fails one is rendered by Jinja (counted ``guard_miss``). Otherwise the shape has no frame
(``None``) and its rows are rendered by Jinja, as before. Spans come from the same renders: each
edge is a literal length plus the lengths of the contents before it (a derived content by its own
length), so filling a frame gives the same text and spans as rendering the row.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from pipeline_core.chat.span_cuts import Span
from pipeline_core.tokenizer.template_reads import Derivation, Guard
from pipeline_core.tokenizer.template_trace import Content, render_traced

OPEN, CLOSE = "\ue010", "\ue011"  # private-use delimiters of a sentinel
SENTINEL = re.compile(f"{OPEN}(\\d+)[^{CLOSE}]*{CLOSE}")  # the number: the slot it stands for
# Two sentinel bodies that differ in length, words, case and letters, and carry what escaping,
# JSON or whitespace trimming would change (quotes, backslash, markup, newline, edge spaces).
BODIES = (' \n"\\<b>&\'é Aa\t ', '\t x y Zz "\\<i>&\'ü\n \n ')  # fmt: skip
Shape = tuple[tuple[str, bool], ...]  # (role, content is non-empty) per template message
MAX_SHAPES = 4096  # beyond this many shapes, new ones keep the Jinja path (bounded memory)


@dataclass(frozen=True, slots=True)
class Frame:
    """One render of a shape: ``literals`` around ``slots`` (the content slot written there)."""

    literals: tuple[str, ...]
    slots: tuple[int, ...]
    guards: tuple[Guard, ...] = ()  # what the render asked of the contents (by slot)
    fixed: int = field(init=False, compare=False)  # the literals' characters: a span edge is this plus contents

    def __post_init__(self) -> None:
        object.__setattr__(self, "fixed", sum(map(len, self.literals)))

    def fill(self, contents: list[str]) -> str:
        parts = [self.literals[0]]
        for slot, literal in zip(self.slots, self.literals[1:]):
            parts += (contents[slot], literal)
        return "".join(parts)

    def length(self, lengths: list[int]) -> int:
        """The filled text's length, from the contents' lengths."""
        return self.fixed + sum(map(lengths.__getitem__, self.slots))


@dataclass(frozen=True, slots=True)
class ShapeFrame:
    """The whole render's frame and, per trained assistant turn, its span edges as frames."""

    whole: Frame
    turns: tuple[tuple[Frame, Frame, int], ...]  # (before, through, message index) per assistant turn
    derived: tuple[Derivation, ...] = ()  # slot n + i is derived[i] of an earlier slot (n: the shape's messages)
    guards: tuple[Guard, ...] = ()  # every render's guards: a row failing one is not this frame's
    rewrites: bool = False  # some turn's renders do not extend the next for every filling: use texts()

    def contents(self, row: list[str]) -> list[str]:
        """The row's contents, then each derived content computed as Jinja computes it (by slot)."""
        contents = list(row)
        for derivation in self.derived:
            contents.append(derivation.apply(contents))
        return contents

    def admits(self, contents: list[str]) -> bool:
        """Whether the contents (``contents(row)``) answer every guard as the sentinels did."""
        return all(guard.holds(contents) for guard in self.guards)

    def admitted(self, row: list[str]) -> list[str] | None:
        """The row's contents with the derived ones, or None when they fail a guard (Jinja renders it)."""
        contents = self.contents(row) if self.derived else row
        return None if self.guards and not self.admits(contents) else contents

    def texts(self, row: list[str]) -> tuple[str, list[tuple[str, str, int]]] | None:
        """The row's whole text and, per assistant turn, its (before, through, message index) texts:
        what Jinja renders for the row; None when it fails a guard."""
        if (contents := self.admitted(row)) is None:
            return None
        return self.whole.fill(contents), [(b.fill(contents), t.fill(contents), k) for b, t, k in self.turns]

    def render(self, row: list[str]) -> tuple[str, list[Span]] | None:
        """The row's text and spans, or None when it fails a guard (Jinja renders it); for a frame
        that does not rewrite history (else ``texts``)."""
        if (contents := self.admitted(row)) is None:
            return None
        lengths = list(map(len, contents))
        spans = [(before.length(lengths), through.length(lengths), k) for before, through, k in self.turns]
        return self.whole.fill(contents), spans


def shape_of(messages: list[dict], tools) -> Shape | None:
    """The conversation's shape, or None when frames do not cover it (tools, reasoning, tool calls, a
    message without content)."""
    if tools is not None or any(m.keys() != {"role", "content"} for m in messages):
        return None
    if not all(isinstance(m["content"], str) for m in messages):
        return None
    if any(m["content"].isspace() for m in messages):  # empty once stripped: a truth the shape does not fix
        return None
    return tuple((m["role"], bool(m["content"])) for m in messages)


def compile_frame(template: str, shape: Shape, variables: dict) -> ShapeFrame | None:
    """The shape's frame, or None when a render reads contents or transforms them."""
    renders = [_frames(template, shape, variables, body) for body in BODIES]
    if renders[0] is None or renders[0] != renders[1]:
        return None
    whole, turns, derived = renders[0]
    frames = (whole, *(f for t in turns for f in t[:2]))
    guards = tuple(dict.fromkeys(guard for frame in frames for guard in frame.guards))
    return ShapeFrame(whole, tuple(turns), derived, guards, rewrites=not _extending(whole, turns))


def _extending(whole: Frame, turns: list[tuple[Frame, Frame, int]]) -> bool:
    """Each turn's renders extend each other and the whole one, in order, for every filling."""
    end = 0
    for before, through, _ in turns:
        if not (_extends(through, before) and _extends(whole, through)) or _chars(before) < end:
            return False
        end = _chars(through)
    return True


class _Sentinels:
    """One body's sentinel contents: message k's is slot k, each new derivation the next slot."""

    def __init__(self, shape: Shape, body: str) -> None:
        self.body, self.n = body, len(shape)
        self.derived: dict[Derivation, int] = {}  # in slot order
        self.messages = [
            {"role": role, "content": self.content(k) if filled else ""} for k, (role, filled) in enumerate(shape)
        ]

    def content(self, slot: int) -> Content:
        return Content(self.text(slot), slot, self.derive)

    def text(self, slot: int) -> str:
        return f"{OPEN}{slot}{self.body}{CLOSE}"

    def derive(self, derivation: Derivation) -> Content:
        return self.content(self.derived.setdefault(derivation, self.n + len(self.derived)))

    def message_of(self, slot: int) -> int:
        """The message a slot's content is made from (a slot no content has: past every message)."""
        table = list(self.derived)
        while self.n <= slot < self.n + len(table):
            slot = table[slot - self.n].parent
        return slot


def _frames(template: str, shape: Shape, variables: dict, body: str):
    """(whole frame, [(before, through, k)], derivations) with sentinels of ``body``, or None."""
    sentinels = _Sentinels(shape, body)
    messages = sentinels.messages
    whole = _frame(template, messages, False, variables, sentinels)
    turns = []
    for k, (role, _) in enumerate(shape):
        if role == "assistant":
            before = _frame(template, messages[:k], True, variables, sentinels)
            through = _frame(template, messages[: k + 1], False, variables, sentinels)
            if before is None or through is None:
                return None
            turns.append((before, through, k))
    return None if whole is None else (whole, turns, tuple(sentinels.derived))


def _frame(
    template: str, messages: list[dict], generation_prompt: bool, variables: dict, sentinels: _Sentinels
) -> Frame | None:
    """One render's frame: each sentinel written verbatim, of a content of the messages rendered."""
    text, reads, guards = render_traced(template, messages, generation_prompt, None, **variables)
    if text is None or reads:
        return None
    literals, slots, pos = [], [], 0
    for found in SENTINEL.finditer(text):
        slot = int(found.group(1))
        if sentinels.message_of(slot) >= len(messages) or found.group() != sentinels.text(slot):
            return None  # written transformed (escaped, JSON...), or not one of ours
        literals.append(text[pos : found.start()])
        slots.append(slot)
        pos = found.end()
    literals.append(text[pos:])
    if any(OPEN in part or CLOSE in part for part in literals):
        return None
    return Frame(tuple(literals), tuple(slots), tuple(guards))


def _extends(longer: Frame, prefix: Frame) -> bool:
    """``prefix``'s text is a prefix of ``longer``'s for every filling."""
    n = len(prefix.slots)
    if longer.slots[:n] != prefix.slots or longer.literals[:n] != prefix.literals[:n]:
        return False
    return len(longer.literals) > n and longer.literals[n].startswith(prefix.literals[n])


def _chars(frame: Frame) -> int:
    """A frame's position measured in (slots, then characters of the last literal): comparable within a row."""
    return len(frame.slots) * 10**9 + len(frame.literals[-1])
