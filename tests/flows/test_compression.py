"""``h5pipe cache --compression``: the filter is applied and recorded, the values read the same."""

from __future__ import annotations

import h5py
import pytest
from typer.testing import CliRunner

from flows.cli import app
from pipeline_core import load_h5, read_attrs


def cache(tmp_path, llamafactory, gpt2_path, name, *extra):
    args = ["cache", "--input", str(llamafactory / "c4_demo.jsonl"), "--output", str(tmp_path / name)]
    args += ["--tokenizer", str(gpt2_path), "--eos-token", "<|endoftext|>", "--pack-size", "256", "--pad-value", "0"]
    result = CliRunner().invoke(app, [*args, *extra])
    assert result.exit_code == 0, result.output
    return tmp_path / name / "c4_demo.h5"


@pytest.mark.parametrize("compression", ["gzip", "lzf"])
def test_compressed_output_reads_the_same_values_and_says_how_it_was_written(
    tmp_path, llamafactory, gpt2_path, compression
):
    plain = cache(tmp_path, llamafactory, gpt2_path, "plain")
    packed = cache(tmp_path, llamafactory, gpt2_path, "packed", "--compression", compression)
    assert read_attrs(str(packed))["compression"] == compression and "compression" not in read_attrs(str(plain))
    with h5py.File(packed) as f:
        assert {f[k].compression for k in f} == {compression}
    a, b = load_h5(str(plain)), load_h5(str(packed))
    assert sorted(a) == sorted(b)
    for key in a:
        left, right = (a[key], b[key]) if isinstance(a[key], list) else ([a[key]], [b[key]])
        assert all(x.dtype == y.dtype and x.equal(y) for x, y in zip(left, right, strict=True)), key


def test_an_unknown_compression_is_a_bad_argument(tmp_path, llamafactory, gpt2_path):
    args = ["cache", "--input", str(llamafactory / "c4_demo.jsonl"), "--output", str(tmp_path / "o")]
    result = CliRunner().invoke(app, [*args, "--tokenizer", str(gpt2_path), "--compression", "zstd"])
    assert result.exit_code == 2 and "compression" in result.output
