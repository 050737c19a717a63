"""A turn whose content is null or missing (OpenAI's tool-calling turn) reaches the template as transformers passes it.

transformers drops a message's null keys before rendering, so the template gets no ``content`` on
``{"role": "assistant", "content": null, "tool_calls": [...]}``: ``is defined`` and ``is string``
are false, ``'...' + message.content`` raises, while ``""`` is a string it gets. Raw OpenAI rows
go through the ``openai`` converter and the ``template`` strategy; the reference is
``apply_chat_template`` on the same raw row. Where transformers raises, the row is refused
(``template_error``) with a message that says how to fix the data.

Before the content_absent mark (converters/content_absent.py), h5pipe gave every such turn ``""``:
Phi-3.5 rendered the null and missing rows that transformers refuses, and the IS_DEFINED and
IS_STRING templates rendered them without the text they write for a missing content.
"""

from __future__ import annotations

import orjson
import pytest

from pipeline_core import AutoTokenizer, ProcessorFactory, StrategyFactory
from pipeline_core.converters import ConverterFactory
from tests.pipeline_core.chat.families import FAMILY_NAMES, family_folder, reference
from tests.pipeline_core.chat.test_template_message_fields import expected_sample, processed

HEAD = "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}"
TAIL = (
    "{%- for c in m.tool_calls or [] %}{{- '<tool_call>' + c.function.name + '</tool_call>' }}{%- endfor %}"
    "{{- '<|im_end|>\\n' }}{%- endfor %}{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
)
CUSTOM = {  # small templates that branch on the content as real ones do
    "is_none": HEAD + "{%- if m.content is none %}{{- '(null)' }}{%- else %}{{- m.content }}{%- endif %}" + TAIL,
    "is_defined": HEAD
    + "{%- if m.content is defined %}{{- m.content }}{%- else %}{{- '(absent)' }}{%- endif %}"
    + TAIL,
    "is_string": HEAD + "{%- if m.content is string %}{{- m.content }}{%- else %}{{- '(no text)' }}{%- endif %}" + TAIL,
    "length": HEAD + "{{- m.content|length|string + ':' }}{{- m.content }}" + TAIL,
}
TEMPLATES = (*FAMILY_NAMES, *CUSTOM)
CALL = {"id": "call_7", "type": "function", "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'}}
TOOLS = [{"type": "function", "function": {"name": "get_weather", "parameters": {"type": "object"}}}]
VARIANTS = ("null", "missing", "empty")


def call_turn(variant: str) -> dict:
    """The assistant's tool-calling turn: ``content`` null, no ``content`` key, or ``""``."""
    turn = {"role": "assistant", "tool_calls": [CALL]}
    return {**turn, "content": {"null": None, "empty": ""}[variant]} if variant != "missing" else turn


def rows_of(variant: str) -> list[dict]:
    """A tool round trip (with tools and a tool result) and a user/assistant alternation around the call."""
    ask = {"role": "user", "content": "Weather in Paris?"}
    return [
        {
            "tools": TOOLS,
            "messages": [
                ask,
                call_turn(variant),
                {"role": "tool", "content": '{"temp": 21}', "tool_call_id": "call_7"},
                {"role": "assistant", "content": "21 degrees."},
            ],
        },
        {
            "messages": [
                ask,
                call_turn(variant),
                {"role": "user", "content": "Thanks."},
                {"role": "assistant", "content": "You are welcome."},
            ]
        },
    ]


ROWS = [row for variant in VARIANTS for row in rows_of(variant)]
NAMES = [f"{variant}/{shape}" for variant in VARIANTS for shape in ("round_trip", "alternating")]
# where transformers raises, pinned: Gemma and Mistral reject the tool role (roles must alternate);
# Phi-3.5 writes '<|assistant|>\n' + message['content'], which fails on a missing content
RAISES = {
    "gemma": {"null/round_trip", "missing/round_trip", "empty/round_trip"},
    "mistral": {"null/round_trip", "missing/round_trip", "empty/round_trip"},
    "phi3.5": {"null/round_trip", "null/alternating", "missing/round_trip", "missing/alternating"},
}


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict:
    made = {name: family_folder(name, tmp_path_factory.mktemp(name.replace(".", "_"))) for name in FAMILY_NAMES}
    return made | {
        name: family_folder("qwen2.5", tmp_path_factory.mktemp(name), template=text) for name, text in CUSTOM.items()
    }


def reference_samples(ref, rows: list[dict], train_tool_calls: bool) -> list[tuple | None]:
    """Each row's (ids, mask) from transformers alone, or None where transformers raises."""
    out = []
    for row in rows:
        try:
            out.append(expected_sample(ref, row, train_tool_calls))
        except Exception:  # noqa: BLE001 - the template's own failure
            out.append(None)
    return out


def check_batch(batch, expected: list[tuple | None], names: list[str] = NAMES) -> None:
    """The batch gives each row's ids and mask, or refuses it (template_error) exactly where transformers raises."""
    errors, kept = dict(batch.errors), iter(range(batch.n_samples))
    for i, want in enumerate(expected):
        if want is None:
            assert i in errors and errors[i].reason == "template_error", f"{names[i]}: rendered, transformers raises"
            continue
        assert i not in errors, f"{names[i]}: {errors[i].message}"
        j = next(kept)
        assert batch.samples["sequence"][j].tolist() == want[0], f"{names[i]}: ids differ from apply_chat_template"
        assert batch.samples["loss_mask"][j].tolist() == want[1], f"{names[i]}: mask differs"


@pytest.mark.parametrize("train_tool_calls", [False, True], ids=["calls_masked", "calls_trained"])
@pytest.mark.parametrize("template", TEMPLATES)
def test_a_turn_without_content_renders_as_transformers(folders, template, train_tool_calls):
    ref = reference(folders[template])
    expected = reference_samples(ref, ROWS, train_tool_calls)
    assert {n for n, want in zip(NAMES, expected) if want is None} == RAISES.get(template, set())
    check_batch(processed(folders[template], ROWS, train_tool_calls=train_tool_calls), expected)


def test_a_template_that_needs_the_content_refuses_the_row_and_says_how_to_fix_it(folders):
    """Phi-3.5 writes '<|assistant|>\n' + message['content']; the error names the v1 message (the
    round trip's tools make a leading system message) and how to fix the row."""
    batch = processed(folders["phi3.5"], rows_of("null"))
    fields = ["messages[2].content", "messages[1].content"]
    assert [(i, e.reason, e.field) for i, e in batch.errors] == [(i, "template_error", f) for i, f in enumerate(fields)]
    message = batch.errors[1][1].message
    assert "messages[1] has no content (null or missing in the row)" in message
    assert 'give the message a content string ("" for a turn that only calls tools)' in message


@pytest.mark.parametrize("template", ["phi3.5", "qwen3", "is_defined", "is_string"])
def test_the_missing_content_survives_the_exported_jsonl(folders, template):
    """export writes the converted sample as a JSONL line; the cache stage reads it back as v1 messages."""
    convert = ConverterFactory.create("openai")
    lines = [orjson.loads(orjson.dumps(convert(row))) for row in ROWS]
    check_batch(
        processed(folders[template], lines, converter=None),
        reference_samples(reference(folders[template]), ROWS, False),
    )


def as_v1(message: dict) -> dict:
    """A transformers message as a v1 one: no content is an empty content_absent message."""
    if "content" not in message:
        return {"role": message["role"], "content": [], "content_absent": True}
    return {"role": message["role"], "content": [{"type": "text", "value": message["content"]}]}


def unframed_answer(answer: dict) -> list[dict]:
    """A conversation without tool calls, whose first answer is ``answer``: a frame (chat/frames.py)
    renders such rows when every message has a content."""
    return [
        {"role": "user", "content": "Hi."},
        answer,
        {"role": "user", "content": "More?"},
        {"role": "assistant", "content": "Done."},
    ]


@pytest.mark.parametrize("template", TEMPLATES)
def test_frames_leave_a_missing_content_to_jinja(folders, template):
    """A v1 message marked content_absent has no frame shape: Jinja renders it as transformers does
    (no content key), never a frame filled with "", which renders the same row with an empty text
    (every template but ``length``, which reads the contents, so has no frames)."""
    tok, ref = AutoTokenizer.from_file(folders[template]), reference(folders[template])
    strategy = StrategyFactory.create("template", tok)
    processor = ProcessorFactory.create_with_strategy("sft", tok, strategy)
    for answer, framed in (
        ({"role": "assistant"}, False),
        ({"role": "assistant", "content": ""}, template != "length"),
    ):
        raw = {"messages": unframed_answer(answer)}
        before = dict(strategy.fast_path_stats)
        batch = processor.process_batch([{"messages": [as_v1(m) for m in raw["messages"]]}])
        check_batch(batch, reference_samples(ref, [raw], True), [f"{answer}"])  # every answer trained
        after = strategy.fast_path_stats
        assert (after["frame"] > before["frame"], after["jinja"] > before["jinja"]) == (framed, not framed), after


@pytest.mark.parametrize("template", ["qwen2.5", "is_defined"])
def test_a_system_message_without_content_stays_beside_the_tools(folders, template):
    """A v1 system message marked content_absent is the row's (transformers gets ``{"role": "system"}``),
    not the one a converter adds to hold the tools: the template gets it, without content (Qwen2.5
    then writes no default system prompt)."""
    chat = [{"role": "system"}, {"role": "user", "content": "Hi."}, {"role": "assistant", "content": "Hello."}]
    raw, v1 = {"tools": TOOLS, "messages": chat}, {"tools": TOOLS, "messages": [as_v1(m) for m in chat]}
    expected = reference_samples(reference(folders[template]), [raw], False)
    check_batch(processed(folders[template], [v1], converter=None), expected, ["system"])


GENERATION_BODY = {  # the assistant's part of a {% generation %} template, as transformers masks it
    "tests": "{%- if m.content is defined %}{{- m.content }}{%- else %}{{- '(absent)' }}{%- endif %}",
    "needs": "{{- '' + m.content }}",  # fails on a missing content, in transformers too
}


def generation_template(body: str) -> str:
    calls = "{%- for c in m.tool_calls or [] %}{{- '<tool_call>' + c.function.name + '</tool_call>' }}{%- endfor %}"
    return (
        "{%- for m in messages %}{{- '<|im_start|>' + m.role + '\\n' }}"
        "{%- if m.role == 'assistant' %}{%- generation %}" + body + calls + "{{- '<|im_end|>' }}{%- endgeneration %}"
        "{{- '\\n' }}{%- else %}{{- m.content + '<|im_end|>\\n' }}{%- endif %}{%- endfor %}"
        "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}"
    )


@pytest.mark.parametrize("body", sorted(GENERATION_BODY))
def test_a_generation_template_masks_as_transformers_or_refuses_the_row(tmp_path, body):
    """transformers' own ``return_assistant_tokens_mask`` is the reference (every assistant turn
    trained, tool calls too); where its template raises, the row is a counted template_error (a
    failing {% generation %} template used to stop the whole batch)."""
    folder = family_folder("qwen2.5", tmp_path / "generation", template=generation_template(GENERATION_BODY[body]))
    ref, expected = reference(folder), []
    for row in ROWS:
        try:
            out = ref.apply_chat_template(
                row["messages"], tools=row.get("tools"), return_dict=True, return_assistant_tokens_mask=True
            )
            expected.append((list(out["input_ids"]), [bool(x) for x in out["assistant_masks"]]))
        except Exception:  # noqa: BLE001 - the template's own failure
            expected.append(None)
    refused = {n for n, want in zip(NAMES, expected) if want is None}
    assert refused == ({n for n in NAMES if not n.startswith("empty")} if body == "needs" else set())
    check_batch(processed(folder, ROWS, train_tool_calls=True), expected)
