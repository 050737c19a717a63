"""The manifest's JSON: what ``dataclasses.asdict`` of every entry gives, and read back unchanged."""

from __future__ import annotations

import json
from dataclasses import asdict

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.commit import manifest as manifest_module
from pipeline_core.commit.manifest import Manifest, ManifestEntry, _as_dict, _compact, _indented

json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**40), 2**40) | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4),
    max_leaves=12,
)
entries = st.builds(
    ManifestEntry,
    name=st.text(min_size=1, max_size=16),
    sha256=st.text(alphabet="0123456789abcdef", min_size=64, max_size=64),
    size=st.integers(0, 2**40),
    source_sha256=st.text(alphabet="0123456789abcdef", max_size=64),
    rows=st.integers(0, 10**9),
    samples=st.integers(0, 10**9),
    tokens=st.integers(0, 10**12),
    extra=st.dictionaries(st.text(max_size=8), json_values, max_size=4),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(entries, max_size=6), st.booleans(), st.lists(st.text(max_size=10), max_size=2))
def test_to_json_is_asdicts_json_and_reads_back(items, complete, dropping):
    manifest = Manifest("cache", "c0ffee", entries={e.name: e for e in items}, complete=complete, dropping=dropping)
    data = manifest.to_json()
    parsed = json.loads(data)
    assert parsed.pop("entries") == {k: asdict(v) for k, v in manifest.entries.items()}
    assert parsed.pop("dropping", []) == sorted(dropping)
    assert parsed == {"stage": "cache", "config_hash": "c0ffee", "format_version": manifest.format_version,
                      "complete": complete}  # fmt: skip
    assert data == json.dumps(json.loads(data), indent=2, sort_keys=True).encode("utf-8")  # stable bytes
    again = Manifest.from_json(data)
    assert again.to_json() == data
    assert again.entries == manifest.entries


def test_writing_does_not_change_the_entries_extra():
    extra = {"result": {"parts": [{"url": "a.bin", "sha256": "0" * 64}], "counts": {"x": 1}}}
    entry = ManifestEntry("a.h5", "f" * 64, 10, extra=extra)
    Manifest("cache", "c", entries={"a.h5": entry}).to_json()
    assert entry.extra == {"result": {"parts": [{"url": "a.bin", "sha256": "0" * 64}], "counts": {"x": 1}}}


def _reference(manifest: Manifest) -> bytes:
    """The manifest as one ``json.dumps`` of it all (what ``to_json`` wrote before its entry texts)."""
    body = {"stage": manifest.stage, "config_hash": manifest.config_hash, "format_version": manifest.format_version,
            "complete": manifest.complete, "entries": {k: asdict(v) for k, v in sorted(manifest.entries.items())}}  # fmt: skip
    if manifest.dropping:
        body["dropping"] = sorted(manifest.dropping)
    return json.dumps(body, indent=2, sort_keys=True).encode("utf-8")


any_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(st.text(max_size=8), inner, max_size=4)
        | st.dictionaries(st.integers(-20, 20), inner, max_size=4)
    ),  # int keys sort as ints, then turn str
    max_leaves=12,
)
any_entries = entries | st.builds(
    ManifestEntry, name=st.text(min_size=1, max_size=16), sha256=st.just("0" * 64), size=st.integers(0, 9),
    extra=st.dictionaries(st.text(max_size=8), any_values, max_size=4),
)  # fmt: skip


@settings(max_examples=80, deadline=None)
@given(st.lists(any_entries, max_size=6), st.lists(st.text(max_size=10), max_size=2), st.data())
def test_the_bytes_are_one_json_dumps_of_it_all_rewrite_after_rewrite(items, dropping, data):
    manifest = Manifest("cache", "c0ffee", dropping=dropping)
    for entry in items:  # as the committer does: one more entry (or a new one for a name), a rewrite
        manifest.entries[entry.name] = entry
        if data.draw(st.booleans()):  # and sometimes one goes
            manifest.entries.pop(data.draw(st.sampled_from(sorted(manifest.entries))))
        assert manifest.to_json() == _reference(manifest)
        assert len(manifest.texts) <= len(manifest.entries)  # the texts of the entries written, no more
    assert manifest.to_json() == _reference(manifest)  # every text found again


# ---- an entry's text by orjson where it is Python's -------------------------------------------
plain_floats = st.floats(-1e15, 1e15).filter(lambda x: "e" not in repr(x))  # no exponent: as repr writes them
ascii_text = st.text(alphabet=st.characters(min_codepoint=0x20, max_codepoint=0x7E), max_size=12)
plain_leaves = st.none() | st.booleans() | st.integers(-(2**63), 2**63 - 1) | plain_floats | ascii_text
odd_leaves = (  # what orjson writes otherwise than Python's encoder, or refuses
    st.integers()  # beyond 64 bits
    | st.floats()  # nan, inf, exponents
    | st.sampled_from([float("nan"), float("inf"), float("-inf"), 1e16, 1e-7, -0.0])
    | st.text(max_size=12)  # non-ASCII, surrogates
    | st.text(alphabet=st.characters(min_codepoint=0, max_codepoint=0x80), max_size=12)  # controls, DEL
    | st.dictionaries(st.integers(-5, 5), plain_leaves, min_size=1, max_size=3)  # keys that are not strings
)
# mostly plain leaves, so that some values take orjson's path (~1 in 5 of the examples, counted)
# and others hold a single odd leaf; the rest fall back to Python's encoder for several reasons
odd_values = st.recursive(
    st.one_of(plain_leaves, plain_leaves, plain_leaves, odd_leaves),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(ascii_text, inner, max_size=4),
    max_leaves=14,
)


@settings(max_examples=300, deadline=None)
@given(st.dictionaries(ascii_text | st.text(max_size=6), odd_values, max_size=5))
def test_an_entry_is_indented_as_pythons_encoder_does_it(value):
    expected = json.dumps(value, indent=2, sort_keys=True)
    assert _indented(value, _compact(value)) == expected


def test_a_typical_entry_takes_the_orjson_path(monkeypatch):
    """The test above would pass with Python's encoder alone: here its fallback is broken, and a
    typical entry (ASCII names, counts, shortest-repr floats, nested results) is still written."""
    entry = ManifestEntry("train_chunk_3.h5", "ab" * 32, 123456, "cd" * 32, 10, 12, 4096,
                          extra={"result": {"seconds": 0.25, "pack_utilisation": 0.9871, "parts": [],
                                            "counts": {"skipped": 0}, "errors_url": None}})  # fmt: skip
    value = _as_dict(entry)
    expected = json.dumps(value, indent=2, sort_keys=True)
    monkeypatch.setattr(manifest_module.json, "dumps", None)  # the fallback would now raise
    assert _indented(value, _compact(value)) == expected


def test_an_orjson_that_indents_otherwise_is_never_used(monkeypatch):
    """Equal compact JSON says the tokens are equal, not the layout: that is checked once against
    Python's encoder, and an orjson laying it out otherwise is not used at all."""
    real = orjson.dumps

    def four_spaces(value, option=0):
        text = real(value, option=option)
        return text.replace(b"\n ", b"\n   ") if option & orjson.OPT_INDENT_2 else text

    monkeypatch.setattr(manifest_module.orjson, "dumps", four_spaces)
    assert manifest_module._orjson_indents_as_python() is False
    monkeypatch.setattr(manifest_module, "_ORJSON_AS_PYTHON", False)
    value = {"name": "a.h5", "extra": {"result": {"parts": [], "seconds": 0.5}}}
    assert _indented(value, _compact(value)) == json.dumps(value, indent=2, sort_keys=True)
