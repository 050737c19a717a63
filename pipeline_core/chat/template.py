"""``template``: the tokenizer's own Jinja chat template, with an exact assistant mask.

::

    ids  = encode_markup(render(messages, tools))    == tokenizer.apply_chat_template(messages, tools=tools)
    mask = the tokens of every assistant turn's span: its text and the end tokens the template writes

The messages are the v1 messages as chat_messages.py hands them to templates. Spans come from:

- the template's ``{% generation %}`` blocks when it has them (one per assistant message, in order);
- otherwise prefix rendering. For assistant message ``i``::

      before  = render(messages[:i], add_generation_prompt=True)
      through = render(messages[:i + 1])
      span    = [len(before), len(through))      if full.startswith(through) and through.startswith(before)

  (the prefix property). It costs 1 + 2 x (assistant turns) renders per conversation.

Tokens: the whole rendered text is encoded once (those are the ids); at each span edge the ids
are cut at the token the character offsets point to, and every part must decode to exactly its
text (nearby cuts are tried when offsets are trimmed). If no such cut exists, a token straddles
the edge: the row cannot be masked exactly and is an error, never a guess.

Errors. A template that fails these checks on a probe conversation is a ConfigError at
construction. A row that fails them later is a RowError (``template_mask``, or ``template_error``
when the template itself raises), counted like any bad row. The rendered text is encoded with
special tokens on, as ``apply_chat_template`` does, so a row whose text holds a special-token
string (``<｜im▁end｜>``...) would smuggle in a control token: it is skipped with reason
``special_token_in_text`` (the chatml and alpaca strategies encode data as text and need no check).
"""

from __future__ import annotations

import re

import numpy as np

from pipeline_core.chat.messages import TemplateConversation, template_conversation, texts_of
from pipeline_core.chat.pieces import Piece
from pipeline_core.chat.strategies import PromptStrategy, StrategyFactory
from pipeline_core.converters.sample import Message, text_message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.tokenizer.auto import AutoTokenizer
from pipeline_core.tokenizer.chat_template import render_chat_template, render_with_generation_spans

GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
PROBE = [
    text_message("user", "Hello there."),
    text_message("assistant", "Hi! How can I help?"),
    text_message("user", "Tell me a joke."),
    text_message("assistant", "Why did the chicken cross the road?"),
]
Span = tuple[int, int, int]  # [start, end) in the rendered text, index of the template message
EDGE_SEARCH = 8  # tokens either side of the guessed edge that are tried


@StrategyFactory.register("template")
class TemplateStrategy(PromptStrategy):
    """The tokenizer's own Jinja chat template, with ids equal to ``apply_chat_template`` and an exact mask.

    How the assistant spans are found, and when a template or a row is refused, is described at
    the top of this module. ``template=`` overrides the tokenizer's template.
    """

    def __init__(self, tokenizer: AutoTokenizer, template: str | None = None) -> None:
        super().__init__(tokenizer)
        self.template = template or tokenizer.chat_template
        if not self.template:
            raise ConfigError(
                "the template strategy renders the tokenizer's chat_template, and this tokenizer has none: "
                "add 'chat_template' to tokenizer_config.json, call set_chat_template(...), or pass template=..."
            )
        self.mask_source = "generation" if GENERATION_TAG.search(self.template) else "prefix"
        self._variables = tokenizer.template_variables()
        specials = sorted(tokenizer.special_tokens, key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, specials))) if specials else None
        self._probe()

    @property
    def name(self) -> str:
        return "template"

    def format_strings(self) -> dict[str, str]:
        return {"chat_template": self.template, "mask": self.mask_source}

    def render_messages(self, messages: list[Message]) -> list[Piece]:
        self._check_specials(messages)
        conversation = template_conversation(messages)
        if self.mask_source == "generation":
            text, spans = self._generation_spans(conversation)
        else:
            text, spans = self._prefix_spans(conversation)
        return self._pieces(text, spans, conversation.owners)

    def render_text(self, messages: list[Message]) -> str:
        conversation = template_conversation(messages)
        return self._render(conversation, conversation.messages, False)

    def assemble_prompt(self, query_tokens):
        raise _no_runs()

    def assemble_response(self, response_tokens):
        raise _no_runs()

    def assemble_prompt_batch(self, queries):
        raise _no_runs()

    def assemble_response_batch(self, responses):
        raise _no_runs()

    # ---- spans ---------------------------------------------------------------------------
    def _prefix_spans(self, conversation: TemplateConversation) -> tuple[str, list[Span]]:
        chat = conversation.messages
        full = self._render(conversation, chat, False)
        spans: list[Span] = []
        for k, message in enumerate(chat):
            if message["role"] != "assistant":
                continue
            before = self._render(conversation, chat[:k], True)
            through = self._render(conversation, chat[: k + 1], False)
            problem = _prefix_problem(full, before, through, spans[-1][1] if spans else 0)
            if problem:
                raise _mask_error(f"{problem} at message {conversation.owners[k]}", conversation.owners[k])
            spans.append((len(before), len(through), k))
        return full, spans

    def _generation_spans(self, conversation: TemplateConversation) -> tuple[str, list[Span]]:
        try:
            text, spans = render_with_generation_spans(
                self.template, conversation.messages, conversation.tools, **self._variables
            )
        except ValueError as e:
            raise _mask_error(str(e), None) from None
        assistants = [k for k, m in enumerate(conversation.messages) if m["role"] == "assistant"]
        if len(spans) != len(assistants):
            raise _mask_error(
                f"its {{% generation %}} blocks produced {len(spans)} span(s) for {len(assistants)} assistant "
                "message(s); every assistant message needs exactly one",
                None,
            )
        return text, [(start, end, k) for (start, end), k in zip(spans, assistants)]

    # ---- tokens --------------------------------------------------------------------------
    def _pieces(self, text: str, spans: list[Span], owners: list[int]) -> list[Piece]:
        """Cut the ids of the whole text where the spans start and end; each part decodes to its text."""
        whole, starts = _encode_with_starts(self.tokenizer, text)
        segments = _segments(text, spans, owners)
        pieces, start, chars = [], 0, 0
        for n, (value, owner, target) in enumerate(segments, 1):
            chars += len(value)
            last = n == len(segments)
            guess = whole.size if last else int(np.searchsorted(starts, chars, side="left"))
            end = self._token_edge(whole, start, value, guess, exact=last)
            pieces.append(Piece(ids=whole[start:end], message=owner, target=target))
            start = end
        return pieces

    def _token_edge(self, whole: np.ndarray, start: int, value: str, guess: int, exact: bool) -> int:
        """The end of the tokens from ``start`` that decode to exactly ``value``.

        The character offsets give the guess; ends near it are tried too, as offsets may be
        trimmed; ``exact`` allows only the guess (the last part must end with the text).
        """
        reach = 0 if exact else EDGE_SEARCH
        candidates = range(max(start, guess - reach), min(whole.size, guess + reach) + 1)
        for end in sorted(candidates, key=lambda k: abs(k - guess)):
            if self.tokenizer.decode(whole[start:end].tolist()) == value:
                return end
        near = self.tokenizer.decode(whole[max(0, guess - 3) : guess + 3].tolist())
        raise _mask_error(
            f"a token crosses the start or end of an assistant turn near {near!r}, so no exact mask exists", None
        )

    # ---- rendering -----------------------------------------------------------------------
    def _render(self, conversation: TemplateConversation, messages: list[dict], generation_prompt: bool) -> str:
        try:
            return render_chat_template(
                self.template, messages, generation_prompt, conversation.tools, **self._variables
            )
        except Exception as e:  # the template is user code: any failure is this row's problem
            raise RowError("template_error", f"the chat template failed on this row: {type(e).__name__}: {e}") from None

    def _check_specials(self, messages: list[Message]) -> None:
        if self._specials is None:
            return
        for i, message in enumerate(messages):
            for value in texts_of(message):
                found = self._specials.search(value)
                if found:
                    raise RowError(
                        "special_token_in_text",
                        f"messages[{i}] contains the special token {found.group()!r}; the template strategy "
                        "encodes rendered text with special tokens on, so it would become a control token. "
                        "Clean the data or use the chatml/alpaca strategy, which encode data as text",
                        f"messages[{i}].content",
                    )

    def _probe(self) -> None:
        try:
            self.render_messages(PROBE)
        except RowError as e:
            raise ConfigError(f"the template strategy cannot mask this chat template exactly: {e.message}") from None


def _prefix_problem(full: str, before: str, through: str, previous_end: int) -> str | None:
    if not through.startswith(before):
        return "rendering messages[:i] with add_generation_prompt=True is not a prefix of rendering messages[:i+1]"
    if not full.startswith(through):
        return "messages[:i+1] renders differently alone than inside the whole conversation"
    if len(before) < previous_end:
        return "an assistant turn starts before the previous one ends"
    return None


def _mask_error(problem: str, owner: int | None) -> RowError:
    return RowError(
        "template_mask",
        f"the chat template cannot be masked exactly: {problem}. Add {{% generation %}} blocks around "
        "the assistant output in the template, or use the chatml strategy",
        None if owner is None else f"messages[{owner}]",
    )


def _no_runs() -> ConfigError:
    return ConfigError(
        "the template strategy renders whole conversations (render_messages); it has no query/response runs"
    )


def _segments(text: str, spans: list[Span], owners: list[int]) -> list[tuple[str, int, bool]]:
    """The text cut at the span edges: (part, owning v1 message or -1, is a span), empty parts left out."""
    parts, pos = [], 0
    for start, end, k in spans:
        parts += [(text[pos:start], -1, False), (text[start:end], owners[k], True)]
        pos = end
    parts.append((text[pos:], -1, False))
    return [p for p in parts if p[0]]


def _encode_with_starts(tokenizer: AutoTokenizer, text: str) -> tuple[np.ndarray, np.ndarray]:
    """The markup ids of ``text`` (== encode_markup) and each token's start character."""
    ids, starts = tokenizer.encode_markup_with_offsets(text)
    return np.asarray(ids, dtype=np.int32), np.asarray(starts, dtype=np.int64)
