"""Media content blocks (image_url, audio_url, video_url) in conversations: skip the row or keep them.

``media="skip"`` (default): a row with a media block is reported as RowError
``unsupported_content:<type>`` (counted by the cache stage, never dropped silently).

``media="keep"``: the text is processed as usual (media blocks render as nothing, no placeholder
tokens are inserted) and the references are stored per sample under key ``media``: a Ragged of
uint8, the UTF-8 bytes of a JSON array, ``"[]"`` when the row has none::

    [{"type": "image_url", "value": "mllm_demo_data/1.jpg", "message": 0}, ...]

``message`` is the index of the message the block was in; the order is the conversation's order.
"""

from __future__ import annotations

import json
from typing import Literal

import numpy as np

from pipeline_core.converters.media import MEDIA_KINDS
from pipeline_core.converters.sample import Message
from pipeline_core.errors import ConfigError, RowError
from pipeline_core.formats.ragged import Ragged

MediaPolicy = Literal["skip", "keep"]
MEDIA_POLICIES = ("skip", "keep")
MEDIA_TYPES = tuple(kind.block_type for kind in MEDIA_KINDS)


def check_policy(media: str) -> MediaPolicy:
    if media not in MEDIA_POLICIES:
        raise ConfigError(f"media must be 'skip' or 'keep', got {media!r}")
    return media  # type: ignore[return-value]


def media_refs(messages: list[Message], policy: MediaPolicy, key: str = "messages") -> list[dict]:
    """The media references of a conversation; under "skip" the first one is a RowError."""
    refs = [
        (i, j, {"type": b["type"], "value": b["value"], "message": i})
        for i, m in enumerate(messages)
        for j, b in enumerate(m["content"])
        if b["type"] in MEDIA_TYPES
    ]
    if refs and policy == "skip":
        i, j, ref = refs[0]
        raise RowError(
            f"unsupported_content:{ref['type']}",
            f"{key}[{i}] has a {ref['type']} block and media='skip'; pass media='keep' to keep the text and "
            "store the references under 'media'",
            f"{key}[{i}].content[{j}]",
        )
    return [ref for _, _, ref in refs]


def media_ragged(refs_per_sample: list[list[dict]]) -> Ragged:
    encoded = [
        np.frombuffer(json.dumps(r, ensure_ascii=False).encode("utf-8"), dtype=np.uint8) for r in refs_per_sample
    ]
    return Ragged.from_lists(encoded, dtype=np.uint8)


def decode_media(values: np.ndarray) -> list[dict]:
    """One sample's ``media`` bytes back to its list of references."""
    return json.loads(np.asarray(values, dtype=np.uint8).tobytes().decode("utf-8"))
