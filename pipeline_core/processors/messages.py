"""Rows as conversations: what the sft and dpo processors read, whatever shape a row has.

Accepted rows (one batch may mix them):

- sft: ``{"messages": [...]}`` (v1, validated exactly like the ``messages`` converter) or
  ``{"query", "response"}`` (-> a user and an assistant message);
- dpo: ``{"chosen_messages", "rejected_messages"}`` or ``{"query", "chosen", "rejected"}``.

With ``converter=`` (a registered converter name or a callable ``row -> sample``) every raw row
is converted first, so raw alpaca / sharegpt / pair JSONL can be cached directly.

Loss weight per message, by ``train_on``: ``"all"``: every assistant message weighs its
``loss_weight`` (0 when it is <= 0); ``"last"``: only the last assistant message does. Other
roles weigh 0, unless ``train_roles`` lists them: a message of another listed role weighs 1 (its
loss_weight is for assistant turns), and leaving ``assistant`` out trains no assistant turn. A tool-call turn (an assistant message with tool_calls blocks and no text) is masked out by
default, with the observations that answer it; ``train_tool_calls=True`` trains on it the way
LLaMA-Factory does. The normalizer applies to text and reasoning blocks, not to the JSON of tools and
tool calls, which must stay valid JSON.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, is_dataclass
from typing import Any, Literal

from pipeline_core.converters.messages import validate_messages
from pipeline_core.converters.registry import ConverterFactory
from pipeline_core.converters.sample import CONTENT_ABSENT, MESSAGE_FIELDS, ROLES, Message, text_message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.processors.base import is_blank, normalized_text
from pipeline_core.processors.media import MediaPolicy, check_policy, media_refs

TrainOn = Literal["all", "last"]
ASSISTANT = frozenset({"assistant"})
TRAIN_ON = ("all", "last")
PAIR_KEYS = ("chosen_messages", "rejected_messages")
NORMALIZED_BLOCKS = ("text", "reasoning")
Normalize = Callable[[str], str] | None


@dataclass(frozen=True, slots=True)
class Conversation:
    messages: list[Message]
    weights: list[float]  # per message
    media: list[dict]  # references kept under media="keep" (processors/media.py)


def resolve_converter(converter: str | Callable | None) -> tuple[Callable | None, str | None]:
    """(the converter callable, its name for describe())."""
    if converter is None:
        return None, None
    if isinstance(converter, str):
        return ConverterFactory.create(converter), converter
    if not callable(converter):
        raise ConfigError(f"converter must be a converter name or a callable row -> sample, got {converter!r}")
    if is_dataclass(converter):  # the registered converters: their repr holds their column/tag options
        return converter, repr(converter)
    return converter, getattr(converter, "__qualname__", type(converter).__qualname__)


def check_train_on(train_on: str) -> TrainOn:
    if train_on not in TRAIN_ON:
        raise ConfigError(f"train_on must be 'all' (every assistant turn) or 'last' (the last one), got {train_on!r}")
    return train_on  # type: ignore[return-value]


def message_weights(
    messages: list[Message], train_on: TrainOn, train_tool_calls: bool = False, roles: frozenset[str] = ASSISTANT
) -> list[float]:
    """Per message: an assistant's loss_weight (by train_on), 1.0 for a message of another trained role."""
    last = _last_assistant(messages) if train_on == "last" else None
    return [_role_weight(m, i, last, train_tool_calls, roles) for i, m in enumerate(messages)]


def _role_weight(message: Message, i: int, last: int | None, train_tool_calls: bool, roles: frozenset[str]) -> float:
    if message["role"] != "assistant":
        return 1.0 if message["role"] in roles else 0.0
    if "assistant" not in roles or (last is not None and i != last):
        return 0.0
    return _weight(message, train_tool_calls)


def check_train_roles(roles) -> frozenset[str]:
    chosen = frozenset(["assistant"] if roles is None else roles)
    unknown = chosen - set(ROLES)
    if unknown or not chosen:
        raise ConfigError(f"train_roles must be a non-empty list of {', '.join(ROLES)}, got {sorted(roles or [])}")
    return chosen


def _weight(message: Message, train_tool_calls: bool) -> float:
    masked = not train_tool_calls and _only_tool_calls(message)
    return 0.0 if message["role"] != "assistant" or masked else max(message["loss_weight"], 0.0)


def _last_assistant(messages: list[Message]) -> int:
    for i in range(len(messages) - 1, -1, -1):
        if messages[i]["role"] == "assistant":
            return i
    return -1


def _only_tool_calls(message: Message) -> bool:
    """Tool calls, maybe reasoning and blank text, nothing else."""
    calls = False
    for b in message["content"]:
        kind = b["type"]
        if kind == "tool_calls":
            calls = True
        elif kind != "reasoning" and not (kind == "text" and is_blank(b["value"])):
            return False
    return calls


def check_shared_prompt(chosen: Conversation, rejected: Conversation) -> None:
    """A pair's two sides must hold the same messages before their first trained one (their
    prompt): a preference between answers to different prompts is no preference, and trainers
    (TRL, LLaMA-Factory) take one prompt per pair."""
    prompts = [_prompt(side) for side in (chosen, rejected)]
    if prompts[0] == prompts[1]:
        return
    at = next((i for i, (a, b) in enumerate(zip(*prompts)) if a != b), min(map(len, prompts)))
    raise RowError(
        "prompt_mismatch",
        f"chosen_messages and rejected_messages differ at message {at}, before their trained answer "
        f"(prompts of {len(prompts[0])} and {len(prompts[1])} messages); a pair shares its prompt: give both "
        "sides the same messages up to the answers they compare",
        f"rejected_messages[{at}]",
    )


def _prompt(conversation: Conversation) -> list[tuple]:
    first = next((i for i, w in enumerate(conversation.weights) if w > 0), len(conversation.messages))
    return [(m["role"], m["content"], _fields(m)) for m in conversation.messages[:first]]


def _fields(message: Message) -> tuple:
    """The message's name and tool_call_id, and whether its content is absent: a template may write
    them, or test for a content, so they are prompt too."""
    return (*(message.get(key) for key in MESSAGE_FIELDS), bool(message.get(CONTENT_ABSENT)))


class ConversationReader:
    """Turns one row into its conversation(s): converter, validation, normalizer, weights, media."""

    def __init__(
        self,
        converter: str | Callable | None = None,
        train_on: str = "all",
        media: str = "skip",
        query_key: str = "query",
        train_tool_calls: bool = False,
        train_roles=None,
    ) -> None:
        self.train_roles = check_train_roles(train_roles)
        self.converter, self.converter_name = resolve_converter(converter)
        self.train_on: TrainOn = check_train_on(train_on)
        self.media: MediaPolicy = check_policy(media)
        self.query_key = query_key
        self.train_tool_calls = bool(train_tool_calls)

    def describe(self) -> dict:
        roles = {} if self.train_roles == ASSISTANT else {"train_roles": sorted(self.train_roles)}
        return {
            "converter": self.converter_name,
            "train_on": self.train_on,
            "train_tool_calls": self.train_tool_calls,
            "media": self.media,
            **roles,
            # since 2026-12-06 v1 messages carry these to every strategy (rows holding them were
            # refused or lost them): in the key whatever the strategy, a user's own included
            "message_fields": ",".join((*MESSAGE_FIELDS, CONTENT_ABSENT)),
            "flat_row_extras": "refused",  # since 2026-12-07 (their system/history/tools were dropped)
            # since 2026-12-07 a per_turn or truncated sample lists only its messages' media
            **({"media_listed": "per_sample"} if self.media == "keep" else {}),
        }

    def sft(self, row: Any, response_key: str = "response", normalize: Normalize = None) -> Conversation:
        row = self._converted(row)
        if "messages" in row:
            return self._conversation(validate_messages(row, "messages"), normalize, "messages")
        if any(k in row for k in PAIR_KEYS):
            raise RowError(
                "wrong_shape",
                "this row is a preference pair (chosen_messages/rejected_messages); use the dpo processor",
            )
        _require_one_shape(row, ("messages", self.query_key), response_key)
        refuse_flat_extras(row)
        query, response = (normalized_text(row, k, normalize) for k in (self.query_key, response_key))
        return self._conversation(_single_turn(query, response), None)  # normalized above

    def pair(self, row: Any, normalize: Normalize = None) -> tuple[Conversation, Conversation]:
        row = self._converted(row)
        if any(k in row for k in PAIR_KEYS):
            chosen, rejected = (self._conversation(validate_messages(row, k), normalize, k) for k in PAIR_KEYS)
            return chosen, rejected
        if "messages" in row:
            raise RowError(
                "wrong_shape",
                "this row is one conversation (messages); dpo needs chosen_messages and "
                "rejected_messages, or query/chosen/rejected",
            )
        _require_one_shape(row, ("chosen_messages", self.query_key), "chosen")
        refuse_flat_extras(row)
        query, chosen, rejected = (normalized_text(row, k, normalize) for k in (self.query_key, "chosen", "rejected"))
        return (  # normalized above
            self._conversation(_single_turn(query, chosen), None),
            self._conversation(_single_turn(query, rejected), None),
        )

    def _converted(self, row: Any) -> Mapping[str, Any]:
        if self.converter is not None:
            row = self.converter(row)
        _require_object(row)
        return row

    def _conversation(self, messages: list[Message], normalize: Normalize, key: str = "messages") -> Conversation:
        refs = media_refs(messages, self.media, key)
        messages = [_normalized(m, normalize) for m in messages] if normalize else messages
        return Conversation(
            messages, message_weights(messages, self.train_on, self.train_tool_calls, self.train_roles), refs
        )


FLAT_EXTRAS = ("system", "history", "tools")  # what a converter would render; a flat row carries none


def flat_extras(row: Mapping[str, Any]) -> list[str]:
    """The keys of a flat query/response row that a conversation would hold but the row cannot carry."""
    return [key for key in FLAT_EXTRAS if row.get(key) not in (None, "", [], {})]


def refuse_flat_extras(row: Mapping[str, Any]) -> None:
    if found := flat_extras(row):
        raise RowError(
            "uncarried_field",
            f"a flat query/response row carries no {'/'.join(found)}, and this one has {found}: they would "
            "be dropped. Pass converter='alpaca' (it reads system, history and tools columns), or remove them",
            found[0],
        )


def _require_object(row: Any) -> None:
    if not isinstance(row, Mapping):
        raise RowError("not_an_object", f"row is a {type(row).__name__}, expected a JSON object")


def _require_one_shape(row: Mapping[str, Any], shapes: tuple[str, str], second: str) -> None:
    """A row with neither shape's first key names both shapes (and the converter option)."""
    if not any(k in row for k in shapes):
        messages_key, query_key = shapes
        raise RowError(
            "missing_field",
            f"row has neither {messages_key!r} nor {query_key!r}/{second!r}; row has {sorted(row)}. "
            "For raw alpaca/sharegpt rows pass converter=...",
            messages_key,
        )


def _single_turn(query: str, response: str) -> list[Message]:
    return [text_message("user", query), text_message("assistant", response)]


def _normalized(message: Message, normalize: Callable[[str], str]) -> Message:
    content = [
        {**b, "value": normalize(b["value"])} if b["type"] in NORMALIZED_BLOCKS else b for b in message["content"]
    ]
    return {**message, "content": content}
