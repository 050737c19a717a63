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

from tokenizers import Tokenizer

from pipeline_core.errors import ConfigError
from pipeline_core.formats.ragged import Ragged
from pipeline_core.tokenizer.gigatoken import (
    GigatokenBackend,
    GigatokenMismatch,
    GigatokenUnavailable,
)
from pipeline_core.tokenizer.probe import probe_texts, verify_backend
from pipeline_core.tokenizer.protocol import EncodeBackend
from pipeline_core.tokenizer.verdicts import UNKNOWN, recall, remember, verdict_key


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
        return Ragged.from_id_lists([e.ids for e in encodings])


def create_backend(tokenizer_json: str, backend: str = "auto") -> EncodeBackend:
    build = _BUILDERS.get(backend)
    if build is None:
        raise ConfigError(f"unknown tokenizer backend {backend!r}; choose one of {', '.join(map(repr, _BUILDERS))}")
    return build(tokenizer_json)


def _forced_gigatoken(tokenizer_json: str) -> EncodeBackend:
    """gigatoken, checked against `tokenizers` on the probe set unless a verdict is recorded (verdicts.py)."""
    key = verdict_key(tokenizer_json)
    known = recall(key)
    if known is not UNKNOWN and known is not None:
        raise GigatokenUnavailable(known)
    try:
        # a tokenizer gigatoken cannot load fails here, first; one it loaded before loads at first use
        candidate = GigatokenBackend(tokenizer_json, lazy=known is None)
        if known is UNKNOWN:
            _verify(candidate, TokenizersBackend(tokenizer_json), tokenizer_json)
    except GigatokenUnavailable as err:
        remember(key, err.reason)
        raise
    if known is UNKNOWN:
        remember(key, None)
    candidate.verified = True
    return candidate


def _auto(tokenizer_json: str) -> EncodeBackend:
    try:
        return _forced_gigatoken(tokenizer_json)
    except GigatokenUnavailable as err:
        warnings.warn(f"{err.reason}; using the slower tokenizers backend", stacklevel=3)
        fallback = TokenizersBackend(tokenizer_json)
        fallback.fallback_reason = err.reason
        return fallback


def _verify(candidate: GigatokenBackend, reference: EncodeBackend, tokenizer_json: str) -> None:
    """GigatokenMismatch unless ``candidate`` gives the ids of ``reference`` on the probe set."""
    mismatch = verify_backend(candidate, reference, probe_texts(tokenizer_json))
    if mismatch is not None:
        raise GigatokenMismatch(mismatch)


_BUILDERS: dict[str, Callable[[str], EncodeBackend]] = {
    "auto": _auto,
    "tokenizers": TokenizersBackend,
    "gigatoken": _forced_gigatoken,
}
