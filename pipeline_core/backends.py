"""Encode backends behind AutoTokenizer.

A backend turns a batch of user texts into a Ragged of token ids. User text is always encoded
*as text*: a special-token string such as ``<|endoftext|>`` inside a document becomes the ids of
its characters, never the special id, so data cannot inject control tokens.

Backends, by name (``create_backend``):

- ``"tokenizers"``: HuggingFace `tokenizers`, the reference; always ``verified``.
- ``"gigatoken"``: the faster `gigatoken` (backends_gigatoken.py). It is checked against the
  reference on the probe set (probe.py) when built; a tokenizer it cannot load or encodes
  differently raises ConfigError naming the cause.
- ``"auto"`` (default): gigatoken when it loads and reproduces the reference on every probe,
  otherwise `tokenizers` after one warning that names the cause (the first differing text).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Protocol

import numpy as np
from tokenizers import Tokenizer

from pipeline_core.backends_gigatoken import (
    GigatokenBackend,
    GigatokenMismatch,
    GigatokenUnavailable,
)
from pipeline_core.errors import ConfigError
from pipeline_core.probe import probe_texts, verify_backend
from pipeline_core.ragged import Ragged, offsets_from_lengths


class EncodeBackend(Protocol):
    name: str

    def encode_batch(self, texts: list[str]) -> Ragged: ...


class TokenizersBackend:
    """The reference backend: HuggingFace `tokenizers`, special tokens encoded as text.

    ``fallback_reason`` says why ``"auto"`` chose it over gigatoken (None when asked for).
    """

    name = "tokenizers"
    verified = True

    def __init__(self, tokenizer_json: str) -> None:
        self._tok = Tokenizer.from_str(tokenizer_json)
        self._tok.encode_special_tokens = True
        self.fallback_reason: str | None = None

    def encode_batch(self, texts: list[str]) -> Ragged:
        encodings = self._tok.encode_batch_fast(texts, add_special_tokens=False)
        id_lists = [e.ids for e in encodings]
        lengths = np.fromiter(map(len, id_lists), dtype=np.int64, count=len(id_lists))
        offsets = offsets_from_lengths(lengths)
        values = np.fromiter(
            (i for ids in id_lists for i in ids), dtype=np.int32, count=int(offsets[-1])
        )
        return Ragged(values, offsets)


def create_backend(tokenizer_json: str, backend: str = "auto") -> EncodeBackend:
    build = _BUILDERS.get(backend)
    if build is None:
        raise ConfigError(f"unknown tokenizer backend {backend!r}; choose one of {', '.join(map(repr, _BUILDERS))}")
    return build(tokenizer_json)


def _checked_gigatoken(tokenizer_json: str, reference: EncodeBackend) -> GigatokenBackend:
    """gigatoken, verified against ``reference`` on the probe set; GigatokenUnavailable if unusable."""
    candidate = GigatokenBackend(tokenizer_json)
    mismatch = verify_backend(candidate, reference, probe_texts(tokenizer_json))
    if mismatch is not None:
        raise GigatokenMismatch(mismatch)
    candidate.verified = True
    return candidate


def _forced_gigatoken(tokenizer_json: str) -> EncodeBackend:
    return _checked_gigatoken(tokenizer_json, TokenizersBackend(tokenizer_json))


def _auto(tokenizer_json: str) -> EncodeBackend:
    reference = TokenizersBackend(tokenizer_json)
    try:
        return _checked_gigatoken(tokenizer_json, reference)
    except GigatokenUnavailable as err:
        warnings.warn(f"{err.reason}; using the slower tokenizers backend", stacklevel=3)
        reference.fallback_reason = err.reason
        return reference


_BUILDERS: dict[str, Callable[[str], EncodeBackend]] = {
    "auto": _auto,
    "tokenizers": TokenizersBackend,
    "gigatoken": _forced_gigatoken,
}
