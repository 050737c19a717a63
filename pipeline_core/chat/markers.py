"""Control-token markers that follow the tokenizer: which spelling of a marker this vocabulary has.

The ``chatml`` turn markers and the ``alpaca`` end of response are meant as control tokens, one
special id each. Their spelling depends on the model family::

    Qwen, Hermes, most ChatML models      <|im_start|>  <|im_end|>
    AutoTokenizer.train, DeepSeek family  <｜im▁start｜>  <｜im▁end｜>     (the design's full-width form)
    alpaca's end of response              the tokenizer's eos token

A default marker resolves to the first spelling that is a single special id of the tokenizer.
When none is, writing the marker anyway would encode it as a dozen ordinary text pieces (and
train on them): a silent difference, so it is a ConfigError naming both fixes, unless the caller
asks for plain-text markers with ``text_markers=True``. A marker passed explicitly is used as
written: the caller chose it.
"""

from __future__ import annotations

from pipeline_core.errors import ConfigError
from pipeline_core.tokenizer.auto import EOS_TOKEN, IM_END, IM_START, AutoTokenizer

CHATML_SPELLINGS = (("<|im_start|>", "<|im_end|>"), (IM_START, IM_END))


def is_control_token(tokenizer: AutoTokenizer, token: str) -> bool:
    """``token`` is a special token of the tokenizer and markup-encodes to its one id."""
    return token in tokenizer.special_tokens and len(tokenizer.encode_markup(token)) == 1


def chatml_markers(tokenizer: AutoTokenizer, text_markers: bool) -> tuple[str, str]:
    """(start, end) of a ChatML turn for this tokenizer."""
    for start, end in CHATML_SPELLINGS:
        if is_control_token(tokenizer, start) and is_control_token(tokenizer, end):
            return start, end
    if text_markers:
        return IM_START, IM_END
    spellings = " or ".join(f"{s!r}/{e!r}" for s, e in CHATML_SPELLINGS)
    raise marker_error("chatml", "the turn markers", spellings, tokenizer, "user_start=..., user_end=..., ...")


def eos_marker(tokenizer: AutoTokenizer, text_markers: bool) -> str:
    """alpaca's end of response: the tokenizer's eos token."""
    if tokenizer.has_role("eos"):
        return tokenizer.eos_token
    if text_markers:
        return EOS_TOKEN
    raise marker_error(
        "alpaca", "the end of response (response_suffix)", "an eos token", tokenizer, "response_suffix=..."
    )


def marker_error(strategy: str, what: str, wanted: str, tokenizer: AutoTokenizer, argument: str) -> ConfigError:
    return ConfigError(
        f"the {strategy} strategy writes {what} as control tokens, and the tokenizer {tokenizer.source} has "
        f"no {wanted} as a single special token (its special tokens: {sorted(tokenizer.special_tokens)}); "
        f"written anyway they would be plain text pieces, trained on. Fix: pass the markers this model uses "
        f"(strategy_kwargs: {argument}), set the tokenizer's eos_token where that is the marker, use "
        "strategy 'template' with the model's chat template, or pass text_markers=True to accept "
        "plain-text markers knowingly"
    )
