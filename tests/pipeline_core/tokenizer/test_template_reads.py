"""What a traced render records of a message content (template_reads.py, traced_strings.py): which
questions become guards, which string methods derive new contents, which uses stay reads, and that
a guard or a derivation asks a row exactly what the template asked."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from pipeline_core.tokenizer.template_reads import Derivation, Guard
from pipeline_core.tokenizer.template_trace import render_traced
from pipeline_core.tokenizer.traced_strings import Content

GUARDS = {  # template -> the guard it records of message 0 ("<A b>" stands for any content)
    "{{ m.startswith('<') }}": Guard(0, "startswith", ("<",), True),
    "{{ m.endswith(('x', 'y')) }}": Guard(0, "endswith", (("x", "y"),), False),
    "{{ 'b' in m }}": Guard(0, "in", ("b",), True),
    "{{ m in '<A b> and more' }}": Guard(0, "in literal", ("<A b> and more",), True),
    "{{ m not in 'abc' }}": Guard(0, "in literal", ("abc",), False),
    "{{ m == 'hi' }}": Guard(0, "==", ("hi",), False),
    "{{ m != 'hi' }}": Guard(0, "!=", ("hi",), True),
    "{{ m.isdigit() }}": Guard(0, "isdigit", (), False),
}
DERIVATIONS = {  # template -> (the derivations of message 0, in slot order 2, 3...; the guards)
    "{{ m.lstrip('\\n') }}": ([Derivation(0, "lstrip", ("\n",))], []),
    "{{ m.strip('\\n') }}": ([Derivation(0, "strip", ("\n",))], []),
    "{{ m | trim }}": ([Derivation(0, "strip", ())], []),
    "{{ m.strip() }}{{ m.strip(none) }}": ([Derivation(0, "strip", ())], []),
    "{{ m.rstrip(' \\t') }}": ([Derivation(0, "rstrip", (" \t",))], []),
    "{{ m.lstrip('<') }}": ([Derivation(0, "lstrip", ("<",))], [Guard(2, "blank", (), False)]),
    "{{ m.replace('b', 'c') }}": ([Derivation(0, "replace", ("b", "c"))], [Guard(2, "blank", (), False)]),
    "{{ m | replace('b', 'c') }}": ([Derivation(0, "replace", ("b", "c", -1))], [Guard(2, "blank", (), False)]),
    "{{ m.removeprefix('<') }}": ([Derivation(0, "removeprefix", ("<",))], [Guard(2, "blank", (), False)]),
    "{{ m.lstrip('\\n').strip().endswith('>') }}": (
        [Derivation(0, "lstrip", ("\n",)), Derivation(2, "strip", ())],
        [Guard(3, "endswith", (">",), True)],
    ),
}
READS = [
    "{{ m.split(' ')[0] }}",
    "{{ m | length }}",
    "{{ m == n }}",  # another content as the operand
    "{{ n in m }}",
    "{{ (m ~ '').startswith('<') }}",  # a string made from the content, not the content
    "{{ (m ~ '').strip() }}",
    "{{ m.replace(n, 'c') }}",  # a content as a derivation's argument
    "{{ m.lstrip('\\n')[0] }}",  # a derived content is read like any other
]


def traced(template: str):
    derived: list[Derivation] = []

    def derive(derivation: Derivation) -> Content:
        if derivation not in derived:
            derived.append(derivation)
        slot = 2 + derived.index(derivation)
        return Content(f"<D{slot}>", slot, derive)

    contents = [Content("<A b>", 0, derive), Content("<C d>", 1, derive)]
    text, reads, guards = render_traced(
        "{% set m = messages[0] %}{% set n = messages[1] %}" + template, contents, False, None
    )
    return text, reads, guards, derived


@pytest.mark.parametrize("template", sorted(GUARDS))
def test_questions_of_a_content_are_guards(template):
    text, reads, guards, derived = traced(template)
    assert text is not None and reads == [] and guards == [GUARDS[template]] and derived == []


@pytest.mark.parametrize("template", sorted(DERIVATIONS))
def test_string_methods_of_a_content_derive_contents(template):
    text, reads, guards, derived = traced(template)
    assert text is not None and reads == [], reads
    assert (derived, guards) == DERIVATIONS[template]


@pytest.mark.parametrize("template", READS)
def test_other_uses_stay_reads(template):
    text, reads, guards, derived = traced(template)
    assert reads, (text, guards)


def test_a_derived_content_is_a_new_sentinel():
    """The template writes the derived content's own sentinel, and what it asks of it is guarded on its slot."""
    text, reads, guards, derived = traced("{{ m.lstrip('\\n').endswith('>') }}|{{ m.lstrip('\\n') }}|{{ m }}")
    assert (text, reads) == ("True|<D2>|<A b>", [])
    assert guards == [Guard(2, "endswith", (">",), True)] and derived == [Derivation(0, "lstrip", ("\n",))]


def test_invalid_arguments_raise_as_jinja_would():
    text, reads, guards, derived = traced("{{ m.removeprefix(none) }}")
    assert text is None and derived == []


@pytest.mark.parametrize(
    ("guard", "row", "holds"),
    [
        (Guard(0, "startswith", ("<t>",), False), "<t>x", False),
        (Guard(0, "startswith", ("<t>",), False), "x<t>", True),
        (Guard(0, "in", ("</think>",), False), "a</think>b", False),
        (Guard(0, "in literal", ("abcd",), False), "bc", False),
        (Guard(0, "in literal", ("abcd",), False), "e", True),
        (Guard(0, "==", ("hi",), False), "hi", False),
        (Guard(0, "blank", (), False), "", False),
        (Guard(0, "blank", (), False), " \n", False),
        (Guard(0, "blank", (), False), " x ", True),
    ],
)
def test_a_guard_asks_the_row_again(guard, row, holds):
    assert guard.holds([row]) is holds


ARG = st.sampled_from(["", "\n", " \n", "\t ", "a", "ab", "<x>", "\n\n"])


@given(row=st.text(), op=st.sampled_from(["lstrip", "rstrip", "strip", "removeprefix", "removesuffix"]), arg=ARG)
def test_a_derivation_computes_the_str_method(row, op, arg):
    assert Derivation(0, op, (arg,)).apply([row]) == getattr(row, op)(arg)
    assert Derivation(0, "replace", (arg, "Z")).apply([row]) == row.replace(arg, "Z")


@given(row=st.text(), op=st.sampled_from(["lstrip", "rstrip", "strip"]), arg=ARG)
def test_only_whitespace_stripping_claims_to_keep_a_filled_content(row, op, arg):
    """keeps_filled: a row with a non-whitespace character keeps one (otherwise a 'blank' guard is recorded)."""
    derivation = Derivation(0, op, (arg,))
    if derivation.keeps_filled() and row.strip():
        assert derivation.apply([row]).strip()
    assert derivation.keeps_filled() == (arg.isspace() or arg == "")
