"""What a traced render records of a message content (template_reads.py, traced_strings.py): which
questions become guards, which stay reads, and that a guard asks a row exactly what the template asked."""

from __future__ import annotations

import pytest

from pipeline_core.tokenizer.template_reads import SAME, Guard
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
    "{{ m.lstrip('\\n') }}": Guard(0, "lstrip", ("\n",), SAME),
    "{{ m.strip('\\n') }}": Guard(0, "strip", ("\n",), SAME),
}
READS = [
    "{{ m.lstrip('<') }}",  # a string answer that is not the content
    "{{ m.split(' ')[0] }}",
    "{{ m | length }}",
    "{{ m == n }}",  # another content as the operand
    "{{ n in m }}",
    "{{ (m ~ '').startswith('<') }}",  # a string made from the content, not the content
    "{{ m.replace('b', 'c') }}",
]


def traced(template: str):
    contents = {"m": Content("<A b>", "<A b>", 0), "n": Content("<C d>", "<C d>", 1)}
    return render_traced(
        "{% set m = messages[0] %}{% set n = messages[1] %}" + template, [*contents.values()], False, None
    )


@pytest.mark.parametrize("template", sorted(GUARDS))
def test_questions_of_a_content_are_guards(template):
    text, reads, guards = traced(template)
    assert text is not None and reads == [] and guards == [GUARDS[template]]


@pytest.mark.parametrize("template", READS)
def test_other_uses_stay_reads(template):
    text, reads, guards = traced(template)
    assert reads, (text, guards)


def test_an_unchanged_result_is_the_content_itself():
    """lstrip returned the Content: what is asked of the result is guarded on the same message."""
    text, reads, guards = traced("{{ m.lstrip('\\n').endswith('>') }}|{{ m.lstrip('\\n') }}")
    assert (text, reads) == ("True|<A b>", [])
    assert guards == [Guard(0, "lstrip", ("\n",), SAME), Guard(0, "endswith", (">",), True)]


@pytest.mark.parametrize(
    ("guard", "row", "holds"),
    [
        (Guard(0, "startswith", ("<t>",), False), "<t>x", False),
        (Guard(0, "startswith", ("<t>",), False), "x<t>", True),
        (Guard(0, "in", ("</think>",), False), "a</think>b", False),
        (Guard(0, "in literal", ("abcd",), False), "bc", False),
        (Guard(0, "in literal", ("abcd",), False), "e", True),
        (Guard(0, "==", ("hi",), False), "hi", False),
        (Guard(0, "lstrip", ("\n",), SAME), "\nx", False),
        (Guard(0, "lstrip", ("\n",), SAME), "x\n", True),
    ],
)
def test_a_guard_asks_the_row_again(guard, row, holds):
    assert guard.holds([row]) is holds
