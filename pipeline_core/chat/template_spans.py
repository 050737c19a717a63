"""Spans of the ``template`` strategy: which characters of a row's render(s) each trained turn owns.

Prefix rendering, for assistant message ``k``::

    before  = render(messages[:k], add_generation_prompt=True)
    through = render(messages[:k + 1])
    span    = [len(before), len(through))        when through.startswith(before)

When every turn's ``through`` is also a prefix of the whole render, the row is the whole
conversation with every assistant turn a span; when one is not, the template rewrites history and
``rewritten`` decides (see chat/template.py). The same decision is taken on texts Jinja renders
(``_prefix_spans``) and on texts filled into a frame (``_samples_of``, chat/frames.py). Templates
with ``{% generation %}`` blocks give their spans directly (``_generation_spans``).

``TemplateSpans`` is a base of TemplateStrategy, which provides ``trained_roles``, ``rewritten`` and
``_variables`` (the template's variables and chat_template_kwargs).
"""

from __future__ import annotations

from jinja2.exceptions import UndefinedError

from pipeline_core.chat.messages import TemplateConversation
from pipeline_core.chat.span_cuts import Span, mask_error
from pipeline_core.errors import RowError
from pipeline_core.tokenizer.chat_template import render_chat_template, render_with_generation_spans

PROBE_TEXT = "h5pipe turn text probe"  # stands in for a turn's text to find where the template writes it


class TemplateSpans:
    """Span derivation from renders; the strategy's ``trained_roles``, ``rewritten``, ``_variables``."""

    def _render(
        self, template: str, conversation: TemplateConversation, messages: list[dict], generation_prompt: bool
    ) -> str:
        try:
            return render_chat_template(template, messages, generation_prompt, conversation.tools, **self._variables)
        except Exception as e:  # the template is user code: any failure is this row's problem
            raise template_error(e, conversation, messages) from None

    def _prefix_spans(
        self, template: str, conversation: TemplateConversation, per_turn: bool
    ) -> list[tuple[str, list[Span]]]:
        chat = conversation.messages
        full = self._render(template, conversation, chat, False)
        spans: list[Span] = []
        for k, message in enumerate(chat):
            if message["role"] not in self.trained_roles:
                continue
            end = spans[-1][1] if spans else 0
            if message["role"] != "assistant":
                spans.append(self._other_span(template, conversation, k, full, end))
                continue
            before = self._render(template, conversation, chat[:k], True)
            through = self._render(template, conversation, chat[: k + 1], False)
            if not exact_turn(before, through, full, end):
                turn = lambda j: self._turn(template, conversation, j)  # noqa: E731
                return self._rewritten(conversation, conversation.owners[k], per_turn, turn)
            spans.append((len(before), len(through), k))
        return [(full, spans)]

    def _other_span(self, template: str, conversation: TemplateConversation, k: int, full: str, after: int) -> Span:
        """A trained non-assistant turn: from where the render of messages[:k+1] writes its text to
        that render's end (its end tokens); the render must be a prefix of the whole one. Where the
        text starts is found by rendering the turn with a probe text in its place (a search for the
        text itself finds a blank or repeated text in the wrong place)."""
        chat = conversation.messages
        through = self._render(template, conversation, chat[: k + 1], False)
        probe = self._render(template, conversation, [*chat[:k], {**chat[k], "content": PROBE_TEXT}], False)
        start = probe.find(PROBE_TEXT, after)
        tail = probe[start + len(PROBE_TEXT) :]
        placed = start >= 0 and through[:start] == probe[:start] and len(through) - len(tail) >= start
        if not (placed and through.endswith(tail) and full.startswith(through)):
            raise mask_error(
                f"message {conversation.owners[k]} ({chat[k]['role']}) is not written where a text in its place "
                "would be, or renders differently alone than inside the whole conversation",
                conversation.owners[k],
            )
        return (start, len(through), k)

    def _turn(self, template: str, conversation: TemplateConversation, k: int) -> tuple[str, str]:
        """(render of messages[:k] with the generation prompt, render of messages[:k+1]); the first
        must be a prefix of the second, else turn k has no exact answer."""
        chat = conversation.messages
        before = self._render(template, conversation, chat[:k], True)
        through = self._render(template, conversation, chat[: k + 1], False)
        return self._checked(conversation, k, before, through)

    def _checked(self, conversation: TemplateConversation, k: int, before: str, through: str) -> tuple[str, str]:
        if not through.startswith(before):
            raise mask_error(
                "rendering messages[:i] with add_generation_prompt=True is not a prefix of rendering "
                f"messages[:i+1] at message {conversation.owners[k]}",
                conversation.owners[k],
            )
        return before, through

    def _rewritten(
        self, conversation: TemplateConversation, owner: int, per_turn: bool, turn
    ) -> list[tuple[str, list[Span]]]:
        """A row whose template rewrites history: the render through its last assistant turn
        (or through each one, ``per_turn``), that turn alone a span. ``owner``: the v1 message
        whose turn has no exact answer inside the whole render; ``turn(k)``: turn k's (before,
        through) renders, checked (_turn, or the frame's texts)."""
        if self.rewritten == "refuse" or self.trained_roles != {"assistant"}:
            raise mask_error(
                f"the template rewrites history: message {owner} has no exact answer inside the whole "
                "conversation; rewritten='last' trains the last turn on the render up to it",
                owner,
            )
        turns = [k for k, m in enumerate(conversation.messages) if m["role"] == "assistant"]
        samples = []
        for k in turns if per_turn else turns[-1:]:
            before, through = turn(k)
            samples.append((through, [(len(before), len(through), k)]))
        return samples

    def _generation_spans(self, template: str, conversation: TemplateConversation) -> tuple[str, list[Span]]:
        try:
            text, spans = render_with_generation_spans(
                template, conversation.messages, conversation.tools, **self._variables
            )
        except ValueError as e:  # the generation output cannot be located
            raise mask_error(str(e), None) from None
        except Exception as e:  # the template failed, as in _render
            raise template_error(e, conversation, conversation.messages) from None
        assistants = [k for k, m in enumerate(conversation.messages) if m["role"] == "assistant"]
        if len(spans) == len(assistants):
            return text, [(start, end, k) for (start, end), k in zip(spans, assistants)]
        if len(spans) == 1 and self._inside_last(template, conversation, assistants, spans[0]):
            return text, [(*spans[0], assistants[-1])]
        raise mask_error(
            f"its {{% generation %}} blocks produced {len(spans)} span(s) for {len(assistants)} assistant "
            "message(s); every assistant message needs exactly one, or only the last one has one",
            None,
        )

    def _inside_last(self, template, conversation, assistants: list[int], span: tuple[int, int]) -> bool:
        """The one generation span lies after everything before the last assistant message."""
        if not assistants:
            return False
        chat = conversation.messages[: assistants[-1]]
        return span[0] >= len(self._render(template, conversation, chat, True))

    def _samples_of(
        self, conversation: TemplateConversation, whole: str, turns: list[tuple[str, str, int]], per_turn: bool
    ) -> list[tuple[str, list[Span]]]:
        """_prefix_spans' decision on texts filled into a frame (trained roles: assistant only)."""
        end, by_turn = 0, {k: (before, through) for before, through, k in turns}
        for before, through, k in turns:
            if not exact_turn(before, through, whole, end):
                turn = lambda j: self._checked(conversation, j, *by_turn[j])  # noqa: E731
                return self._rewritten(conversation, conversation.owners[k], per_turn, turn)
            end = len(through)
        return [(whole, [(len(before), len(through), k) for before, through, k in turns])]


def template_error(error: Exception, conversation: TemplateConversation, messages: list[dict]) -> RowError:
    """The row's ``template_error``. A template that reads a content the row does not have (null or
    missing: chat/messages.py) fails as it does in transformers; the error says how to give one."""
    message = f"the chat template failed on this row: {type(error).__name__}: {error}"
    absent = [conversation.owners[k] for k, m in enumerate(messages) if "content" not in m]
    if not (absent and isinstance(error, UndefinedError) and "content" in str(error)):
        return RowError("template_error", message)
    return RowError(
        "template_error",
        f"{message}. messages[{absent[0]}] has no content (null or missing in the row), and like "
        "transformers the template gets none; this template needs one: give the message a content "
        'string ("" for a turn that only calls tools), or use a template that renders such turns',
        f"messages[{absent[0]}].content",
    )


def exact_turn(before: str, through: str, whole: str, end: int) -> bool:
    """A turn's span [len(before), len(through)) is exact inside the whole render: each render is a
    prefix of the next, and the span starts after the previous one's ``end``."""
    return through.startswith(before) and whole.startswith(through) and len(before) >= end
