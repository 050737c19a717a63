"""The six real model templates on the LLaMA-Factory fixtures, against transformers as the reference.

For every row: the ids equal ``PreTrainedTokenizerFast.apply_chat_template(..., tokenize=True)`` on
the same conversation, and the mask equals the spans found by rendering prefixes with transformers
(``messages[:k]`` with ``add_generation_prompt=True`` up to ``messages[:k+1]``), mapped to tokens by
transformers' own offsets. A template that rewrites history gives the render through the last
assistant turn, that turn trained. Every refusal is explained: transformers raises on the same
conversation, or a token truly straddles a span edge (both counted).
"""

from __future__ import annotations

import json
from collections import Counter

import numpy as np
import pytest

from pipeline_core import AutoTokenizer, ProcessorFactory, StrategyFactory
from tests.pipeline_core.chat.families import (
    FAMILY_NAMES,
    family_folder,
    legacy_llama2_tokenizer,
    metaspace_tokenizer,
    reference,
)
from tests.pipeline_core.processors.test_messages_helpers import fixture_rows, weights_of

ROWS = {"alpaca_en_demo.json": 80, "glaive_toolcall_en_demo.json": 80, "v1_sft_demo.jsonl": 120}


def raw_reference(row: dict) -> tuple[list[dict], list | None]:
    """(messages, tools) a transformers user passes for a raw v1 messages row, without our converter."""
    messages, tools, _ = reference_messages(row["messages"])
    row_tools = json.loads(row["tools"]) if isinstance(row.get("tools"), str) else row.get("tools")
    return messages, row_tools or tools


def reference_messages(v1: list[dict]) -> tuple[list[dict], list | None, list[int]]:
    """What a transformers user passes: (messages, tools, v1 index of each message); also reads
    LLaMA-Factory's raw ``tool_call`` blocks."""
    out, tools, owners = [], None, []
    for i, m in enumerate(v1):
        for b in m["content"]:
            if b["type"] == "tools":
                parsed = json.loads(b["value"])
                tools = (tools or []) + (parsed if isinstance(parsed, list) else [parsed])
        if m["role"] == "system" and all(b["type"] == "tools" for b in m["content"]):
            continue
        msg = {"role": m["role"], "content": "".join(b["value"] for b in m["content"] if b["type"] == "text")}
        if m.get("content_absent"):  # the row's content was null: transformers drops the key
            del msg["content"]
        reasoning = [b["value"] for b in m["content"] if b["type"] == "reasoning"]
        if reasoning:
            msg["reasoning_content"] = "".join(reasoning)
        calls = [json.loads(b["value"]) for b in m["content"] if b["type"] in ("tool_calls", "tool_call")]
        if calls:
            msg["tool_calls"] = [c if "function" in c else {"type": "function", "function": c} for c in calls]
        out.append(msg)
        owners.append(i)
    return out, tools, owners


class Reference:
    """The expected sample of one conversation, computed with transformers alone."""

    def __init__(self, ref, v1: list[dict], train_on: str = "all", **kwargs):
        self.ref, self.kwargs = ref, kwargs
        self.messages, self.tools, self.owners = reference_messages(v1)
        self.weights = weights_of(v1, train_on)

    def render(self, messages, generation_prompt=False) -> str:
        return self.ref.apply_chat_template(
            messages, tools=self.tools, tokenize=False, add_generation_prompt=generation_prompt, **self.kwargs
        )

    def ids(self, messages) -> list[int]:
        out = self.ref.apply_chat_template(messages, tools=self.tools, tokenize=True, **self.kwargs)
        return list(out["input_ids"] if hasattr(out, "keys") else out)

    def expected(self) -> tuple[list[int], np.ndarray, list]:
        """(ids, mask, tokens straddling a span edge) of the sample: the whole conversation, or
        through the last assistant turn when the template rewrites history."""
        assistants = [k for k, m in enumerate(self.messages) if m["role"] == "assistant"]
        full = self.render(self.messages)
        turns = {k: (self.render(self.messages[:k], True), self.render(self.messages[: k + 1])) for k in assistants}
        rewritten = any(not (full.startswith(t) and t.startswith(b)) for b, t in turns.values())
        if rewritten:
            last = assistants[-1]
            kept, text, trained = self.messages[: last + 1], turns[last][1], [last]
        else:
            kept, text, trained = self.messages, full, assistants
        spans = [(len(turns[k][0]), len(turns[k][1])) for k in trained if self.weights[self.owners[k]] > 0]
        ids = self.ids(kept)
        encoded = self.ref(text, add_special_tokens=False, return_offsets_mapping=True)
        assert encoded["input_ids"] == ids
        offsets = encoded["offset_mapping"]
        mask = np.array([any(s <= a and b <= e for s, e in spans) for a, b in offsets], dtype=bool)
        straddles = [(a, b) for a, b in offsets for s, e in spans if a < s < b or a < e < b]
        return ids, mask, straddles

    def trains_nothing(self) -> bool:
        return not self.expected()[1].any()

    def no_exact_answer(self) -> bool:
        """The sample's trained turn is not an extension of its prompt, or a token straddles an edge."""
        last = max(k for k, m in enumerate(self.messages) if m["role"] == "assistant")
        if not self.render(self.messages[: last + 1]).startswith(self.render(self.messages[:last], True)):
            return True
        return bool(self.expected()[2])

    def raises(self) -> bool:
        try:
            self.render(self.messages)
            for k, m in enumerate(self.messages):
                if m["role"] == "assistant":
                    self.render(self.messages[:k], True)
        except Exception:  # noqa: BLE001 - any failure of the template itself
            return True
        return False


def check_rows(tok, ref, rows, convert, stats: dict | None = None, **strategy_kwargs) -> Counter:
    """Every row against transformers; ``stats`` (when given) receives the strategy's fast_path_stats."""
    strategy = StrategyFactory.create("template", tok, **strategy_kwargs)
    processor = ProcessorFactory.create_with_strategy("sft", tok, strategy, converter=convert, media="keep")
    batch = processor.process_batch(rows)
    errors = dict(batch.errors)
    reasons: Counter = Counter()
    kept = iter(range(batch.n_samples))
    kwargs = strategy_kwargs.get("chat_template_kwargs") or {}
    for i, row in enumerate(rows):
        expect = Reference(ref, convert(row)["messages"], **kwargs)
        if i in errors:
            reason = errors[i].reason
            reasons[reason] += 1
            explained = {
                "template_error": expect.raises,
                "template_mask": expect.no_exact_answer,
                "nothing_to_train": expect.trains_nothing,
            }
            assert explained[reason](), f"row {i} refused without cause: {errors[i].message}"
            continue
        j = next(kept)
        ids, mask, straddles = expect.expected()
        assert not straddles, f"row {i}: kept although a token straddles a span edge"
        assert batch.samples["sequence"][j].tolist() == ids, f"row {i}: ids differ from apply_chat_template"
        assert batch.samples["loss_mask"][j].tolist() == mask.tolist(), f"row {i}: mask differs"
        reasons["ok"] += 1
    if stats is not None:
        stats.update(strategy.fast_path_stats)
    return reasons


# the refusals, counted: Gemma's and Mistral's templates raise on the 43 rows with a tool turn ('roles must alternate')
# (check_rows verifies transformers raises on each); every other row of every file is answered
REFUSED = {(f, "glaive_toolcall_en_demo.json"): {"template_error": 43} for f in ("gemma", "mistral")}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    return {name: family_folder(name, tmp_path_factory.mktemp(name.replace(".", "_"))) for name in FAMILY_NAMES}


@pytest.mark.parametrize("file_name", sorted(ROWS))
@pytest.mark.parametrize("family", FAMILY_NAMES)
def test_real_template_matches_transformers(folders, llamafactory, family, file_name):
    rows, convert = fixture_rows(llamafactory, file_name)
    folder = folders[family]
    stats: dict = {}
    reasons = check_rows(AutoTokenizer.from_file(folder), reference(folder), rows[: ROWS[file_name]], convert, stats)
    refused = REFUSED.get((family, file_name), {})
    assert reasons == Counter({"ok": ROWS[file_name] - sum(refused.values()), **refused}), reasons
    # the fast path answered: GPT-2-based tokenizers cut every sample by segments, without offsets;
    # frames render every row without tools (Qwen3's through guards: its template asks each content
    # whether it holds </think>), but Phi-3.5 with tools (it rejects the tool role) and Qwen3's tool
    # rows (multi-turn: it rewrites history)
    rows_seen = stats["frame"] + stats["jinja"]
    assert stats["offsets"] == 0 and stats["segments"] > 0, stats
    if file_name != "glaive_toolcall_en_demo.json":
        assert stats["frame"] == rows_seen == ROWS[file_name], stats
    elif family not in ("phi3.5", "qwen3"):
        assert stats["frame"] > 0, stats


def reasoning_rows() -> list[dict]:
    """Multi-turn reasoning and tool conversations: what the official Qwen3 template rewrites."""

    def t(kind, value):
        return {"type": kind, "value": value}

    call = json.dumps({"name": "get_weather", "arguments": {"city": "Paris"}})
    tools = json.dumps([{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}])
    return [
        {"messages": [{"role": "user", "content": [t("text", "2+2?")]},
                      {"role": "assistant", "content": [t("reasoning", "Two and two."), t("text", "4")]},
                      {"role": "user", "content": [t("text", "and 3+3?")]},
                      {"role": "assistant", "content": [t("reasoning", "Three and three."), t("text", "6")]}]},
        {"tools": tools,
         "messages": [{"role": "user", "content": [t("text", "Weather in Paris?")]},
                      {"role": "assistant", "content": [t("reasoning", "Call the tool."), t("tool_call", call)]},
                      {"role": "tool", "content": [t("text", '{"temp": 21}')]},
                      {"role": "assistant", "content": [t("reasoning", "It said 21."), t("text", "21 degrees.")]}]},
        {"messages": [{"role": "system", "content": [t("text", "Be brief.")]},
                      {"role": "user", "content": [t("text", "hi")]},
                      {"role": "assistant", "content": [t("text", "hello")]}]},
    ]  # fmt: skip


@pytest.mark.parametrize("family", ["qwen3", "qwen2.5", "phi3.5", "llama3.1"])
def test_multi_turn_reasoning_and_tools(folders, family):
    from pipeline_core.converters import ConverterFactory

    folder = folders[family]
    reasons = check_rows(
        AutoTokenizer.from_file(folder), reference(folder), reasoning_rows(), ConverterFactory.create("messages")
    )
    assert reasons == Counter({"ok": 3}), reasons  # every conversation answered, none refused


def test_qwen3_enable_thinking_is_passed_and_recorded(folders):
    from pipeline_core.converters import ConverterFactory

    folder = folders["qwen3"]
    tok, kwargs = AutoTokenizer.from_file(folder), {"enable_thinking": False}
    convert = ConverterFactory.create("messages")
    # enable_thinking=False prompts with an empty <think></think>: the rows that reason have no exact
    # answer (transformers' renders say so, check_rows verifies), the row without reasoning is exact
    reasons = check_rows(tok, reference(folder), reasoning_rows(), convert, chat_template_kwargs=kwargs)
    assert reasons == Counter({"ok": 1, "template_mask": 2}), reasons
    assert check_rows(tok, reference(folder), reasoning_rows(), convert) == Counter({"ok": 3})
    strategy = StrategyFactory.create("template", tok, chat_template_kwargs=kwargs)
    assert strategy.format_strings()["chat_template_kwargs"] == '{"enable_thinking": false}'


@pytest.mark.parametrize("layout", ["metaspace", "legacy_llama2"])
def test_mistral_with_a_sentencepiece_style_tokenizer(tmp_path, llamafactory, layout):
    base = metaspace_tokenizer() if layout == "metaspace" else legacy_llama2_tokenizer()
    folder = family_folder("mistral", tmp_path / "mistral", base=base)
    tok = AutoTokenizer.from_file(folder)
    vocab = json.loads((folder / "tokenizer.json").read_text(encoding="utf-8"))["model"]["vocab"]
    assert any(piece.startswith("▁") for piece in vocab)  # SentencePiece-style word starts
    for file_name in ("alpaca_en_demo.json", "v1_sft_demo.jsonl"):
        rows, convert = fixture_rows(llamafactory, file_name)
        stats: dict = {}
        reasons = check_rows(tok, reference(folder), rows[:60], convert, stats)
        assert reasons == Counter({"ok": 60}), reasons
        # frames still render; not a byte-level tokenizer, so the cuts come from offsets
        assert stats == {"frame": 60, "jinja": 0, "guard_miss": 0, "segments": 0, "offsets": 60}, stats


def test_v1_row_with_tools_renders_the_tools_section(folders):
    from pipeline_core.converters import ConverterFactory

    folder = folders["qwen2.5"]
    row = reasoning_rows()[1]
    sample = ConverterFactory.create("messages")(row)
    messages, tools, _ = reference_messages(sample["messages"])
    assert tools and tools[0]["function"]["name"] == "get_weather"
    tok = AutoTokenizer.from_file(folder)
    strategy = StrategyFactory.create("template", tok)
    out = ProcessorFactory.create_with_strategy("sft", tok, strategy).process(row)
    text = tok.decode(out["sequence"].tolist())
    assert "<tools>" in text and "get_weather" in text
    raw_messages, raw_tools = raw_reference(row)  # the raw row as a transformers user passes it
    expected = reference(folder).apply_chat_template(raw_messages, tools=raw_tools, tokenize=True)["input_ids"]
    assert out["sequence"].tolist() == list(expected)
    assert check_rows(tok, reference(folder), [row], ConverterFactory.create("messages"))["ok"] == 1


@pytest.mark.parametrize("family", ["qwen3", "phi3.5"])
def test_per_turn_gives_one_sample_per_trained_turn(folders, family):
    from pipeline_core.converters import ConverterFactory

    folder = folders[family]
    tok, ref = AutoTokenizer.from_file(folder), reference(folder)
    convert = ConverterFactory.create("messages")
    rows = reasoning_rows()[:2]
    strategy = StrategyFactory.create("template", tok, rewritten="per_turn")
    batch = ProcessorFactory.create_with_strategy("sft", tok, strategy, converter=convert).process_batch(rows)
    assert not batch.errors
    expected = []
    for i, row in enumerate(rows):
        expect = Reference(ref, convert(row)["messages"])
        for k, m in enumerate(expect.messages):
            if m["role"] == "assistant" and expect.weights[expect.owners[k]] > 0:
                turn = Reference(ref, convert(row)["messages"][: expect.owners[k] + 1])
                expected.append((i, *turn.expected()[:2]))
    # row 0: both answers; row 1: the tool-call turn is masked out by default, so only the last
    assert batch.rows.tolist() == [i for i, _, _ in expected] == [0, 0, 1]
    for j, (_, ids, mask) in enumerate(expected):
        assert batch.samples["sequence"][j].tolist() == ids
        assert batch.samples["loss_mask"][j].tolist() == mask.tolist()
