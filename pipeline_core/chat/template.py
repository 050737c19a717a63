"""``template``: the tokenizer's own Jinja chat template, with an exact assistant mask, decided per row.

::

    ids  = encode_markup(render(messages, tools, **chat_template_kwargs))
         == tokenizer.apply_chat_template(messages, tools=tools, **chat_template_kwargs)   (transformers)
    mask = the tokens of each trained assistant turn's span: its text and the end tokens the template writes

The template is the one transformers would use: ``template=`` (a Jinja text, or the name of one of
the tokenizer's named templates), else the tokenizer's, where a tokenizer with named templates
gives ``tool_use`` to rows with tools and ``default`` to the others. The messages are the v1
messages as messages.py hands them to templates (with transformers' reasoning aliases, and no
``content`` where the row's was null or missing, as transformers drops null keys).

Spans, per row:

- ``{% generation %}`` blocks when the template has them: one per assistant message, or a single
  one inside the last assistant message (a last-turn-only template: earlier turns are not
  trained, as transformers' ``return_assistant_tokens_mask`` leaves them out);
- otherwise prefix rendering (chat/template_spans.py): assistant message ``k``'s span runs from the
  end of ``render(messages[:k], add_generation_prompt=True)`` to the end of ``render(messages[:k+1])``,
  when the first is a prefix of the second. When every turn's ``through`` (the second) is also a
  prefix of the whole render, the row is the whole
  conversation with every assistant turn a span. When one is not, the template rewrites history
  (Qwen3 drops earlier reasoning, Phi-3.5 writes eos only at the very end): no earlier turn has an
  exact answer inside the whole render, so with ``rewritten="last"`` (the default) the row is
  ``through`` of its last assistant turn with that turn alone trained: exactly what the model is
  shown when it generates that turn. ``rewritten="per_turn"`` makes one sample per assistant turn
  instead (each ``through`` of its turn, that turn trained; the sft processor keeps those with
  something to train), as LLaMA-Factory v1's prefix cuts do; ``"refuse"`` makes such rows a RowError.
  Rows whose template does not rewrite them are one sample whatever the setting.

Tokens: the whole text is encoded once (those are the ids); each span edge is cut at the token
whose character offset is the edge. A token whose characters cross an edge means no exact mask
exists: the row is a RowError (``template_mask``), never a guess. Offsets work for byte-level and
SentencePiece-style (Metaspace) tokenizers alike; decoded text is never compared.

Errors. A template that cannot mask even a single-turn conversation is a ConfigError at
construction. Every other failure is one row's RowError: ``template_mask`` (no exact answer),
``template_error`` (the template raised: also where it reads a content the row has not, as in
transformers), ``special_token_in_text`` (a row's text holds a special token string, which the
rendered text would turn into a control token).
"""

from __future__ import annotations

import copy
import json
import re
from collections import Counter
from typing import Literal

from pipeline_core.chat.frames import MAX_SHAPES, Shape, ShapeFrame, compile_frame, shape_of
from pipeline_core.chat.messages import TemplateConversation, template_conversation, texts_of
from pipeline_core.chat.pieces import Piece
from pipeline_core.chat.prompt import MESSAGE_FIELDS_RULE, PromptStrategy
from pipeline_core.chat.registry import StrategyFactory
from pipeline_core.chat.span_cuts import Span, cut_samples
from pipeline_core.chat.template_choice import checked_kwargs, chosen_templates
from pipeline_core.chat.template_spans import TemplateSpans
from pipeline_core.converters.sample import Message, text_message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.tokenizer.auto import AutoTokenizer
from pipeline_core.tokenizer.segments import MarkupSegments

GENERATION_TAG = re.compile(r"{%-?\s*generation\s*-?%}")
PROBE = [text_message("user", "Hello there."), text_message("assistant", "Hi! How can I help?")]
Rewritten = Literal["last", "per_turn", "refuse"]
REWRITTEN = ("last", "per_turn", "refuse")
Rendering = tuple[list[tuple[str, list[Span]]], list[int]]  # (each sample's text and spans, owners)


@StrategyFactory.register("template")
class TemplateStrategy(TemplateSpans, PromptStrategy):
    """The tokenizer's own Jinja chat template, with ids equal to ``apply_chat_template`` and an exact mask.

    How the assistant spans are found, and when a template or a row is refused, is described at
    the top of this module. ``template=`` overrides the tokenizer's template (or names one of its
    named templates); ``chat_template_kwargs`` are passed to the template as transformers passes
    them; ``rewritten`` says what to do with a row whose template rewrites history.
    """

    def __init__(
        self,
        tokenizer: AutoTokenizer,
        template: str | None = None,
        chat_template_kwargs: dict | None = None,
        rewritten: str = "last",
    ) -> None:
        super().__init__(tokenizer)
        self.templates = chosen_templates(tokenizer, template)
        self.template = self.templates.get("default") or next(iter(self.templates.values()))
        self.mask_source = "generation" if GENERATION_TAG.search(self.template) else "prefix"
        if rewritten not in REWRITTEN:
            raise ConfigError(f"rewritten must be one of {', '.join(REWRITTEN)}, got {rewritten!r}")
        self.rewritten: Rewritten = rewritten  # type: ignore[assignment]
        self.kwargs = checked_kwargs(chat_template_kwargs)
        self._variables = {**tokenizer.template_variables(), **self.kwargs}
        specials = sorted(tokenizer.special_tokens, key=len, reverse=True)
        self._specials = re.compile("|".join(map(re.escape, specials))) if specials else None
        self._framed = {t for t in self.templates.values() if not GENERATION_TAG.search(t)}
        self._frames: dict[tuple[str, tuple], ShapeFrame | None] = {}
        self._segments = MarkupSegments.of(tokenizer)
        self.fast_path: Counter = Counter()
        self._probe()
        self.fast_path.clear()

    @property
    def name(self) -> str:
        return "template"

    def format_strings(self) -> dict[str, str]:
        out = {"chat_template": self.template, "mask": self.mask_source}
        out |= {f"chat_template_{name}": text for name, text in self.templates.items() if name != "default"}
        if self.kwargs:
            out["chat_template_kwargs"] = json.dumps(self.kwargs, sort_keys=True, ensure_ascii=False)
        if self.rewritten != "last":
            out["rewritten"] = self.rewritten
        # rules changed on 2026-12-06, recorded so outputs written before them get other cache keys:
        # JSON blocks are checked for special tokens with their escapes undone (messages.texts_of),
        # and a trained non-assistant turn is placed by a probe render (template_spans._other_span)
        out["special_token_check"] = "json_unescaped"
        out |= MESSAGE_FIELDS_RULE  # a message's name and tool_call_id reach the template (prompt.py)
        # rule changed on 2026-12-06, recorded likewise: a message whose row gave no content (null or
        # missing) reaches the template without a content key, as transformers drops null keys (it got "")
        out["null_content"] = "dropped"
        if self.trained_roles != {"assistant"}:
            out["other_turn_spans"] = "probe"
        if self.tokenizer.template_tokens:  # given to the template since 2026-12-07 (it got none)
            out["template_tokens"] = json.dumps(self.tokenizer.template_tokens, sort_keys=True, ensure_ascii=False)
        return out

    def render_messages(self, messages: list[Message]) -> list[Piece]:
        """One sample (``rewritten="per_turn"`` gives the last turn's here: see render_samples)."""
        return self._one(messages, per_turn=False)[-1]

    def render_samples(self, messages: list[Message]) -> list[list[Piece]]:
        """The row's samples: one, or with ``rewritten="per_turn"`` and a template that rewrites
        history, one per assistant turn (each the render through that turn, that turn trained)."""
        return self._one(messages, self.rewritten == "per_turn")

    def _one(self, messages: list[Message], per_turn: bool) -> list[list[Piece]]:
        found = self._cut_all([self._texts(messages, per_turn)])[0]
        if isinstance(found, RowError):
            raise found
        return found

    def render_samples_batch(self, conversations: list[list[Message]]) -> list[list[list[Piece]] | RowError]:
        """Every row rendered first, then all texts encoded in one tokenizer call, then cut."""
        rendered: list[Rendering | RowError] = []
        for messages in conversations:
            try:
                rendered.append(self._texts(messages, self.rewritten == "per_turn"))
            except RowError as e:
                rendered.append(e)
        return self._cut_all(rendered)

    def _texts(self, messages: list[Message], per_turn: bool) -> Rendering:
        """The row's sample texts and their spans, before any encoding."""
        self._check_specials(messages)
        conversation = template_conversation(messages)
        template = self._template_for(conversation)
        framed = self._from_frame(template, conversation, per_turn)
        self.fast_path["frame" if framed is not None else "jinja"] += 1
        if framed is not None:
            return framed, conversation.owners
        return self.jinja_texts(template, conversation, per_turn), conversation.owners

    def jinja_texts(
        self, template: str, conversation: TemplateConversation, per_turn: bool
    ) -> list[tuple[str, list[Span]]]:
        """The row's sample texts and spans rendered by Jinja (no frame)."""
        if GENERATION_TAG.search(template):
            return [self._generation_spans(template, conversation)]
        return self._prefix_spans(template, conversation, per_turn)

    def _from_frame(
        self, template: str, conversation: TemplateConversation, per_turn: bool
    ) -> list[tuple[str, list[Span]]] | None:
        """The row's samples filled into its shape's frame (chat/frames.py), or None: Jinja renders it."""
        shape = shape_of(conversation.messages, conversation.tools)
        frame = None if shape is None else self.frame_for(template, shape, rewrites=True)
        if frame is None:
            return None
        row = [m["content"] for m in conversation.messages]
        if frame.rewrites:
            texts = frame.texts(row)
            rendered = None if texts is None else self._samples_of(conversation, *texts, per_turn)
        else:
            one = frame.render(row)
            rendered = None if one is None else [one]
        if rendered is None:
            self.fast_path["guard_miss"] += 1
        return rendered

    def frame_for(self, template: str, shape: Shape, rewrites: bool = False) -> ShapeFrame | None:
        """The shape's frame (compiled on first use), or None: its rows are rendered by Jinja. A frame
        of a template that rewrites this shape's history only with ``rewrites`` (its ``texts``)."""
        if template not in self._framed or self.trained_roles != {"assistant"}:
            return None
        key = (template, shape)
        if key not in self._frames:
            if len(self._frames) >= MAX_SHAPES:
                return None
            self._frames[key] = compile_frame(template, shape, self._variables)
        frame = self._frames[key]
        return frame if frame is None or rewrites or not frame.rewrites else None

    @property
    def special_token_search(self):
        """``text -> match or None``: where a special token string is in ``text`` (check_texts says the error)."""
        return self._specials.search if self._specials is not None else _nothing

    @property
    def segments(self) -> MarkupSegments | None:
        """The markup encoding by segments (tokenizer/segments.py), or None for this tokenizer."""
        return self._segments

    @property
    def fast_path_stats(self) -> dict[str, int]:
        """Rows rendered from a frame or by Jinja (of which ``guard_miss``: a frame's guard failed),
        samples cut by segments or by offsets, since construction."""
        return {k: self.fast_path[k] for k in ("frame", "jinja", "guard_miss", "segments", "offsets")}

    def _cut_all(self, rendered: list[Rendering | RowError]) -> list[list[list[Piece]] | RowError]:
        flat = [(text, spans, r[1]) for r in rendered if not isinstance(r, RowError) for text, spans in r[0]]
        results, by_segments = cut_samples(flat, self._segments, self.tokenizer)
        self.fast_path["segments"] += by_segments
        self.fast_path["offsets"] += len(flat) - by_segments
        encoded = iter(results)
        out: list[list[list[Piece]] | RowError] = []
        for r in rendered:
            if isinstance(r, RowError):
                out.append(r)
                continue
            cut = [next(encoded) for _ in r[0]]
            errors = [c for c in cut if isinstance(c, RowError)]
            out.append(errors[0] if errors else cut)
        return out

    def render_text(self, messages: list[Message]) -> str:
        conversation = template_conversation(messages)
        return self._render(self._template_for(conversation), conversation, conversation.messages, False)

    def assemble_prompt(self, query_tokens):
        raise _no_runs()

    def assemble_response(self, response_tokens):
        raise _no_runs()

    def assemble_prompt_batch(self, queries):
        raise _no_runs()

    def assemble_response_batch(self, responses):
        raise _no_runs()

    def training_roles(self, roles: frozenset[str]) -> PromptStrategy:
        """A copy that also trains the turns of other roles: each such turn's text as the template
        writes it, and its end tokens (prefix-rendered templates only)."""
        if roles == self.trained_roles:
            return self
        if any(GENERATION_TAG.search(t) for t in self.templates.values()):
            raise ConfigError(
                "train_roles beyond 'assistant' needs a prefix-rendered template; this one marks "
                "{% generation %} blocks, which only say what the assistant generates"
            )
        other = copy.copy(self)
        other.trained_roles = roles
        return other

    def _template_for(self, conversation: TemplateConversation) -> str:
        """transformers' choice among named templates: ``tool_use`` for rows with tools, else ``default``."""
        if conversation.tools is not None and "tool_use" in self.templates:
            return self.templates["tool_use"]
        return self.template

    # ---- rendering -----------------------------------------------------------------------
    def _check_specials(self, messages: list[Message]) -> None:
        for i, message in enumerate(messages):
            self.check_texts(texts_of(message), i)

    def check_texts(self, texts: list[tuple[str, str]], i: int) -> None:
        """A RowError when one of message ``i``'s (field, text) pairs holds a special token string."""
        if self._specials is None:
            return
        for key, value in texts:
            found = self._specials.search(value)
            if found:
                raise RowError(
                    "special_token_in_text",
                    f"messages[{i}].{key} contains the special token {found.group()!r}; the template strategy "
                    "encodes rendered text with special tokens on, so it would become a control token. "
                    "Clean the data or use the chatml/alpaca strategy, which encode data as text",
                    f"messages[{i}].{key}",
                )

    def _probe(self) -> None:
        """A template that cannot mask one plain exchange can mask no row: refused whole."""
        try:
            self.render_messages(PROBE)
        except RowError as e:
            raise ConfigError(f"the template strategy cannot mask this chat template exactly: {e.message}") from None


def _nothing(text: str) -> None:
    return None


def _no_runs() -> ConfigError:
    return ConfigError(
        "the template strategy renders whole conversations (render_messages); it has no query/response runs"
    )
