"""Independent expectations for the messages tests: the documented formats written out by hand.

Nothing here calls the strategies: each expected render is built from the format described in
strategies.py / turn_format.py, so a test compares two separate implementations.
"""

from __future__ import annotations

import json
import warnings
from pathlib import Path

import numpy as np

from pipeline_core import AutoTokenizer
from pipeline_core.converters import converter_from_dataset_info
from tests.conftest import load_json_or_jsonl

IM_START, IM_END, EOS = "<｜im▁start｜>", "<｜im▁end｜>", "<｜end▁of▁sentence｜>"
CHATML_ROLES = {role: (f"{IM_START}{role}\n", f"{IM_END}\n") for role in ("system", "user", "assistant", "tool")}
ALPACA_ROLES = {
    "system": ("", "\n\n"),
    "user": ("### Instruction:\n", "\n\n"),
    "assistant": ("### Response:\n", EOS),
    "tool": ("### Observation:\n", "\n\n"),
}
ROLE_TABLES = {"chatml": CHATML_ROLES, "alpaca": ALPACA_ROLES}
WRAPS = {"reasoning": ("<think>\n", "\n</think>\n\n"), "tool_calls": ("<tool_call>\n", "\n</tool_call>")}
WRAPS["tools"] = ("<tools>\n", "\n</tools>")
MEDIA = ("image_url", "audio_url", "video_url")

# fixture file -> (dataset_info entry name or None for the v1 "messages" converter, processor)
FIXTURES = {
    "alpaca_en_demo.json": ("alpaca_en_demo", "sft"),
    "identity.json": ("identity", "sft"),
    "glaive_toolcall_en_demo.json": ("glaive_toolcall_en_demo", "sft"),
    "mllm_demo.json": ("mllm_demo", "sft"),
    "v1_sft_demo.jsonl": (None, "sft"),
    "dpo_en_demo.json": ("dpo_en_demo", "dpo"),
    "v1_dpo_demo.jsonl": (None, "dpo"),
}


def fixture_rows(llamafactory: Path, file_name: str) -> tuple[list[dict], object]:
    """(raw rows, the converter its dataset_info entry names)."""
    entry, _ = FIXTURES[file_name]
    info = json.loads((llamafactory / "dataset_info.json").read_text(encoding="utf-8"))
    spec = info[entry] if entry else {"converter": "messages"}
    return load_json_or_jsonl(llamafactory / file_name), converter_from_dataset_info(spec)


def body(message: dict) -> str:
    out = ""
    for b in message["content"]:
        if b["type"] == "text":
            out += b["value"]
        elif b["type"] in WRAPS:
            start, end = WRAPS[b["type"]]
            lead = "\n" if out and b["type"] in ("tools", "tool_calls") else ""
            out += lead + start + b["value"] + end
        else:
            assert b["type"] in MEDIA
    return out


def only_tool_calls(message: dict) -> bool:
    """A turn that calls tools and says nothing (blank text and reasoning do not count as saying)."""
    has_call = any(b["type"] == "tool_calls" for b in message["content"])
    says = any(b["type"] == "text" and b["value"].strip() for b in message["content"])
    others = any(b["type"] not in ("text", "tool_calls", "reasoning") for b in message["content"])
    return has_call and not says and not others


def weights_of(messages: list[dict], train_on: str = "all") -> list[float]:
    """Assistant turns keep their weight; others, and turns that are only tool calls (the default), weigh 0."""
    weights = [
        max(m.get("loss_weight", 1.0), 0.0) if m["role"] == "assistant" and not only_tool_calls(m) else 0.0
        for m in messages
    ]
    if train_on == "last":
        last = max(i for i, m in enumerate(messages) if m["role"] == "assistant")
        weights = [w if i == last else 0.0 for i, w in enumerate(weights)]
    return weights


def expected_segments(messages: list[dict], roles: dict, train_on: str = "all") -> list[tuple[str, float]]:
    """(text, weight) in order: role start (0), body and end (the message's weight)."""
    segments = []
    for m, w in zip(messages, weights_of(messages, train_on)):
        start, end = roles[m["role"]]
        segments += [(start, 0.0), (body(m), w), (end, w)]
    return segments


def split_text(segments: list[tuple[str, float]]) -> tuple[str, str, str]:
    """(full text, trained text, untrained text)."""
    full = "".join(s for s, _ in segments)
    return full, "".join(s for s, w in segments if w > 0), "".join(s for s, w in segments if w <= 0)


def check_sample(tok, seq, mask, weight, full: str, trained: str, untrained: str) -> None:
    seq, mask, weight = np.asarray(seq), np.asarray(mask), np.asarray(weight)
    assert seq.size == mask.size == weight.size
    assert mask.dtype == np.bool_ and weight.dtype == np.float32
    assert np.array_equal(weight > 0, mask)
    assert tok.decode(seq.tolist()) == full
    assert tok.decode(seq[mask].tolist()) == trained
    assert tok.decode(seq[~mask].tolist()) == untrained


def check_weights(tok, seq, weight, segments: list[tuple[str, float]]) -> None:
    """Each distinct weight's tokens decode to the segments of that weight, in order."""
    seq, weight = np.asarray(seq), np.asarray(weight)
    for w in {w for _, w in segments if w > 0}:
        want = "".join(s for s, sw in segments if sw == w)
        assert tok.decode(seq[np.isclose(weight, w)].tolist()) == want


def tokenizer_with_specials(base: AutoTokenizer, folder: Path, specials: list[str], **roles) -> AutoTokenizer:
    """``base`` plus extra special tokens (e.g. Llama-3 headers), saved and loaded like a real one."""
    from tokenizers import AddedToken, Tokenizer

    base.save(folder)
    raw = Tokenizer.from_file(str(folder / "tokenizer.json"))
    raw.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in specials])
    raw.save(str(folder / "tokenizer.json"))
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        return AutoTokenizer.from_file(folder, backend="tokenizers", **roles)


def test_body_follows_the_documented_layout():
    message = {
        "role": "assistant",
        "content": [
            {"type": "reasoning", "value": "r"},
            {"type": "text", "value": "t"},
            {"type": "tool_calls", "value": "{}"},
            {"type": "image_url", "value": "a.jpg"},
        ],
    }
    assert body(message) == "<think>\nr\n</think>\n\nt\n<tool_call>\n{}\n</tool_call>"
