"""Media references: ``<image>``/``<video>``/``<audio>`` placeholders become ``*_url`` blocks.

When a row has an images (videos, audios) column, its references are attached in order, one per
placeholder, at the placeholder's position inside the message; the placeholder leaves the text:

    "What is this?<image>" + images=["a.jpg"]
        -> [{"type": "text", "value": "What is this?"}, {"type": "image_url", "value": "a.jpg"}]

Rows without the column are left alone, so a literal "<image>" in plain text survives. A row
whose column is null (as ``datasets`` fills the rows of a media dataset that have none) has no
references: a placeholder in its text is a ``media_mismatch``, as a multimodal template refuses it,
never trained as the literal text "<image>".
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline_core.converters.fields import as_str, json_type
from pipeline_core.converters.sample import ContentBlock, ContentType, Message, block
from pipeline_core.errors import RowError

# how a null media column reads (no references: its placeholders are a media_mismatch); in the repr of
# the converters that attach media, so outputs made before it (placeholders kept as text) get other
# cache keys
NULL_MEDIA = "no_references"


@dataclass(frozen=True, slots=True)
class MediaKind:
    name: str  # the option / default column name: images, videos, audios
    placeholder: str
    block_type: ContentType


MEDIA_KINDS = (
    MediaKind("images", "<image>", "image_url"),
    MediaKind("videos", "<video>", "video_url"),
    MediaKind("audios", "<audio>", "audio_url"),
)


class MediaColumns(Protocol):
    images: str
    videos: str
    audios: str


def attach_media(messages: list[Message], row: Mapping[str, Any], columns: MediaColumns) -> list[Message]:
    refs = _row_media(row, columns)
    if not refs:
        return messages
    _check_counts(messages, refs, columns)
    refs = {placeholder: values for placeholder, values in refs.items() if values}
    if not refs:
        return messages
    queues = {placeholder: iter(values) for placeholder, values in refs.items()}
    pattern = re.compile("|".join(re.escape(p) for p in refs))
    return [_split_message(m, pattern, queues) for m in messages]


def _row_media(row: Mapping[str, Any], columns: MediaColumns) -> dict[str, list[str]]:
    """placeholder -> references, for the media columns this row has (null: none)."""
    found = {}
    for kind in MEDIA_KINDS:
        column = getattr(columns, kind.name)
        if column is not None and column in row:
            found[kind.placeholder] = [] if row[column] is None else _references(row[column], column)
    return found


def _references(value: Any, column: str) -> list[str]:
    if isinstance(value, str):
        return [value]
    if not isinstance(value, list):
        raise RowError(
            "wrong_type",
            f"{column} must be a list of media references (strings), got {json_type(value)}",
            column,
        )
    return [as_str(v, f"{column}[{i}]") for i, v in enumerate(value)]


def _check_counts(messages: list[Message], refs: dict[str, list[str]], columns: MediaColumns) -> None:
    for kind in MEDIA_KINDS:
        if kind.placeholder not in refs:
            continue
        found = sum(_count(m, kind.placeholder) for m in messages)
        given = len(refs[kind.placeholder])
        if found != given:
            column = getattr(columns, kind.name)
            fix = f"put exactly one {kind.placeholder} where each reference belongs"
            if not given:
                fix = f"give the row its {column}, or map no {column} column when the text's {kind.placeholder} is literal"
            raise RowError(
                "media_mismatch",
                f"{column} has {given} reference(s) but the text has {found} {kind.placeholder} placeholder(s); {fix}",
                column,
            )


def _count(message: Message, placeholder: str) -> int:
    return sum(b["value"].count(placeholder) for b in message["content"] if b["type"] == "text")


def _split_message(message: Message, pattern: re.Pattern[str], queues: dict[str, Iterator[str]]) -> Message:
    content = []
    for part in message["content"]:
        if part["type"] == "text" and pattern.search(part["value"]):
            content.extend(_split_text(part["value"], pattern, queues))
        else:
            content.append(part)
    return {**message, "content": content}


def _split_text(text: str, pattern: re.Pattern[str], queues: dict[str, Iterator[str]]) -> list[ContentBlock]:
    blocks, start = [], 0
    for match in pattern.finditer(text):
        if match.start() > start:
            blocks.append(block("text", text[start : match.start()]))
        blocks.append(block(_block_type(match.group()), next(queues[match.group()])))
        start = match.end()
    if start < len(text):
        blocks.append(block("text", text[start:]))
    return blocks


def _block_type(placeholder: str) -> ContentType:
    return next(k.block_type for k in MEDIA_KINDS if k.placeholder == placeholder)
