"""The path of the first value JSON cannot hold, in every container orjson walks into."""

import dataclasses
import enum
import math

import numpy as np
import orjson
import pytest

from pipeline_core.formats.json_values import non_finite, non_finite_in, unencodable


@dataclasses.dataclass
class Turn:
    role: str
    extra: object


class Kind(enum.Enum):
    BAD = frozenset({1})


@pytest.mark.parametrize(
    ("value", "path"),
    [
        ({"a": [1, (2, {"b": {1}})]}, "a[1][1].b"),
        ({"turns": [Turn("user", 1), Turn("assistant", b"x")]}, "turns[1].extra"),
        ({"kind": Kind.BAD}, "kind"),
        ({"outer": {"x": 1, 7: 2}}, "outer"),
        ({"n": 2**64}, "n"),
    ],
)
def test_unencodable_names_the_path_orjson_refuses(value, path):
    with pytest.raises(TypeError):
        orjson.dumps(value, option=orjson.OPT_SERIALIZE_NUMPY)  # the premise: orjson refuses it
    assert unencodable(value)[0] == path


def test_unencodable_finds_nothing_to_blame_in_a_row_orjson_writes():
    assert unencodable({"a": [1, 2**64 - 1, -(2**63), np.int64(3)]}, "boom") == ("", "a value orjson refuses (boom)")


def test_non_finite_paths_reach_into_numpy_arrays_and_dataclasses():
    grid = np.zeros((2, 3), dtype=np.float32)
    grid[1, 2] = np.inf
    assert non_finite({"m": grid}) == ("m[1][2]", math.inf)
    assert non_finite([Turn("user", np.float64("nan"))])[0] == "[0].extra"
    assert non_finite({"ok": np.arange(3, dtype=np.float16), "n": 1.5}) is None


def test_non_finite_in_walks_a_nested_row_only_when_its_line_holds_null():
    row = {"w": [1.0, math.nan]}
    assert non_finite_in(row, orjson.dumps(row)) == ("w[1]", row["w"][1])
    assert non_finite_in(row, b'{"w":[1.0,2.0]}') is None  # trusts a line without null
