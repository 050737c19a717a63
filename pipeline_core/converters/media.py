"""Media references: ``<image>``/``<video>``/``<audio>`` placeholders become ``*_url`` blocks.

When a row has an images (videos, audios) column, its references are attached in order, one per
placeholder, at the placeholder's position inside the message; the placeholder leaves the text:

    "What is this?<image>" + images=["a.jpg"]
        -> [{"type": "text", "value": "What is this?"}, {"type": "image_url", "value": "a.jpg"}]

Rows without the column are left alone, so a literal "<image>" in plain text survives.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from pipeline_core.converters.fields import as_str, json_type
from pipeline_core.converters.sample import ContentBlock, ContentType, Message, block
from pipeline_core.errors import RowError


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
    queues = {placeholder: iter(values) for placeholder, values in refs.items()}
    pattern = re.compile("|".join(re.escape(p) for p in refs))
    return [_split_message(m, pattern, queues) for m in messages]


def _row_media(row: Mapping[str, Any], columns: MediaColumns) -> dict[str, list[str]]:
    """placeholder -> references, for the media columns this row has."""
    found = {}
    for kind in MEDIA_KINDS:
        column = getattr(columns, kind.name)
        if row.get(column) is not None:
            found[kind.placeholder] = _references(row[column], column)
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
            raise RowError(
                "media_mismatch",
                f"{column} has {given} reference(s) but the text has {found} {kind.placeholder} "
                f"placeholder(s); put exactly one {kind.placeholder} where each reference belongs",
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
