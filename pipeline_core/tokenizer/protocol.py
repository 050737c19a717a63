"""What every encode backend offers: a name and ``encode_batch(texts) -> Ragged``.

Kept apart from ``backends`` so the probe and the verdicts can speak of a backend without
importing the module that builds one.
"""

from __future__ import annotations

from typing import Protocol

from pipeline_core.formats.ragged import Ragged


class EncodeBackend(Protocol):
    """Encodes a batch of texts, special-token strings as plain text, into one ragged array."""

    name: str

    def encode_batch(self, texts: list[str]) -> Ragged: ...
