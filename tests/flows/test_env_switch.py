import pytest

from flows.env_switch import env_choice

CHOICES = ("auto", "on", "off")


@pytest.mark.parametrize(("raw", "chosen"), [(" ON ", "on"), ("Off", "off"), ("", "auto"), ("  ", "auto")])
def test_case_and_spaces_are_ignored_and_empty_is_the_default(monkeypatch, raw, chosen):
    monkeypatch.setenv("H5PIPE_TEST_SWITCH", raw)
    assert env_choice("H5PIPE_TEST_SWITCH", CHOICES) == chosen


def test_unset_is_the_default(monkeypatch):
    monkeypatch.delenv("H5PIPE_TEST_SWITCH", raising=False)
    assert env_choice("H5PIPE_TEST_SWITCH", CHOICES, default="off") == "off"


def test_an_unknown_value_raises_the_callers_error_naming_variable_and_choices(monkeypatch):
    monkeypatch.setenv("H5PIPE_TEST_SWITCH", "sometimes")
    with pytest.raises(LookupError, match=r"H5PIPE_TEST_SWITCH='sometimes' is not one of auto, on, off"):
        env_choice("H5PIPE_TEST_SWITCH", CHOICES, LookupError)
