"""ScalarAttrs writes the bytes h5py's own ``attrs[name] = value`` writes, and reads back the same."""

from __future__ import annotations

import hashlib

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats import h5_attrs
from pipeline_core.formats.h5_attrs import ScalarAttrs
from pipeline_core.formats.h5_direct import direct_attrs

VALUES = {
    "ascii": "hello",
    "unicode": "tökën ✓ 日本",
    "empty": "",
    "json": '{"a": [1, 2], "b": null}',
    "int": 50257,
    "negative": -1,
    "big": 2**62,
    "np_int64": np.int64(7),
    "np_int32": np.int32(-3),
    "np_uint16": np.uint16(65535),
    "true": True,
    "false": False,
    "np_bool": np.bool_(True),
    "float": 0.5726,
    "np_float32": np.float32(1.25),
    "list": [1, 2, 3],  # not a scalar: h5py's own path
    "array": np.arange(4, dtype=np.int32),
}


@pytest.fixture(autouse=True, params=["direct", "through h5py"])
def path_taken(request, monkeypatch):
    """Every test runs with plain values created by calling HDF5 directly and with h5py's calls."""
    if request.param == "through h5py":
        monkeypatch.setattr(h5_attrs, "direct_attrs", lambda: None)
    return request.param


def test_hdf5_is_reachable_directly_here():
    # else every "direct" run below silently tests h5py's path twice
    assert direct_attrs() is not None


@pytest.mark.parametrize(
    ("value", "taken"),
    [("text", True), ("", True), (True, True), (-(2**63), True), (0.5, True), ("a\x00b", False), ("\udc80", False)]
    + [(2**63, False), (np.int64(3), False), ([1], False)],
)
def test_the_direct_path_takes_plain_values_only_and_writes_nothing_otherwise(tmp_path, value, taken):
    with h5py.File(tmp_path / "f.h5", "w", libver="latest") as f:
        assert direct_attrs().create(f.id, b"v", value) is taken
        assert ("v" in f.attrs) is taken
        if taken:
            assert f.attrs["v"] == value


def test_a_name_that_exists_is_refused_without_a_word_on_stderr(tmp_path, capfd):
    with h5py.File(tmp_path / "f.h5", "w", libver="latest") as f:
        f.attrs["v"] = 1
        assert direct_attrs().create(f.id, b"v", 2) is False
        assert f.attrs["v"] == 1
    assert capfd.readouterr().err == ""


def _write(path, values: dict, ours: bool) -> bytes:
    with h5py.File(path, "w", libver="latest") as f:
        attrs = ScalarAttrs(f) if ours else f.attrs
        for name, value in values.items():
            attrs[name] = value
    return path.read_bytes()


def _read(path) -> dict:
    with h5py.File(path, "r") as f:
        return {name: f.attrs[name] for name in f.attrs}


def _same(a, b) -> bool:
    return type(a) is type(b) and np.array_equal(a, b) and getattr(a, "dtype", None) == getattr(b, "dtype", None)


def test_the_file_is_byte_identical_to_h5pys_and_reads_back_the_same(tmp_path):
    ours = _write(tmp_path / "ours.h5", VALUES, ours=True)
    theirs = _write(tmp_path / "theirs.h5", VALUES, ours=False)
    assert hashlib.sha256(ours).hexdigest() == hashlib.sha256(theirs).hexdigest()
    got, want = _read(tmp_path / "ours.h5"), _read(tmp_path / "theirs.h5")
    assert list(got) == list(want)
    assert all(_same(got[k], want[k]) for k in want), {k: (got[k], want[k]) for k in want if not _same(got[k], want[k])}


def test_an_attribute_set_again_is_replaced_as_h5py_replaces_it(tmp_path):
    steps = [("narrowed", '{"a": "int32"}'), ("complete", False), ("narrowed", '{"b": "int32"}'), ("complete", True)]
    files = []
    for ours in (True, False):
        path = tmp_path / f"{ours}.h5"
        with h5py.File(path, "w", libver="latest") as f:
            attrs = ScalarAttrs(f) if ours else f.attrs
            for name, value in steps:
                attrs[name] = value
        files.append(path.read_bytes())
    assert files[0] == files[1]
    assert _read(tmp_path / "True.h5") == {"narrowed": '{"b": "int32"}', "complete": np.True_}


def test_an_attribute_set_by_other_code_is_replaced_too(tmp_path):
    files = []
    for ours in (True, False):
        path = tmp_path / f"{ours}.h5"
        with h5py.File(path, "w", libver="latest") as f:
            f.attrs["complete"] = False  # by h5py, before the writer
            (ScalarAttrs(f) if ours else f.attrs)["complete"] = True
        files.append(path.read_bytes())
    assert files[0] == files[1]
    assert _read(tmp_path / "True.h5") == {"complete": np.True_}


@pytest.mark.parametrize("value", [2**70, "a\x00b"], ids=["int past 64 bits", "str with a NUL"])
def test_a_value_that_cannot_be_stored_fails_as_in_h5py_and_leaves_no_attribute(tmp_path, value):
    raised = []
    for ours in (True, False):
        with h5py.File(tmp_path / f"{ours}.h5", "w", libver="latest") as f:
            with pytest.raises(Exception) as caught:
                (ScalarAttrs(f) if ours else f.attrs)["bad"] = value
            assert "bad" not in f.attrs
        raised.append(caught.type)
    assert raised[0] is raised[1]


scalars = st.one_of(
    st.text(max_size=40),
    st.integers(min_value=-(2**63), max_value=2**63 - 1),
    st.booleans(),
    st.floats(allow_nan=False),
)


@settings(max_examples=40, deadline=None)
@given(st.dictionaries(st.text(min_size=1, max_size=12).filter(lambda s: "\x00" not in s), scalars, max_size=12))
def test_any_scalar_attributes_give_h5pys_bytes(tmp_path_factory, values):
    folder = tmp_path_factory.mktemp("attrs")
    assert _outcome(folder / "ours.h5", values, ours=True) == _outcome(folder / "theirs.h5", values, ours=False)


def _outcome(path, values: dict, ours: bool):
    """The file's bytes, or the type of what was raised (a str with a NUL cannot be stored)."""
    try:
        return _write(path, values, ours)
    except Exception as error:
        return type(error)
