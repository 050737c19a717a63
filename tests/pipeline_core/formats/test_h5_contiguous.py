"""Small datasets written whole by H5Writer's low-level path give h5py's ``create_dataset`` bytes."""

from __future__ import annotations

import h5py
import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

from pipeline_core.formats import h5_writer
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged

DTYPES = [np.dtype(t) for t in ("int32", "int64", "uint16", "uint8", "float32", "bool")]


def _h5py_create(file, key, data):
    """What H5Writer called before: h5py's own ``create_dataset``, contiguous."""
    return file.create_dataset(key, data=data, dtype=data.dtype, chunks=None)


def _write(path, arrays: dict, through_h5py: bool) -> bytes:
    with pytest.MonkeyPatch.context() as patch:
        if through_h5py:
            patch.setattr(h5_writer, "_write_contiguous", _h5py_create)
        writer = H5Writer(str(path))
        for key, array in arrays.items():
            if array.ndim == 2:
                writer.append_fixed(key, array)
            else:
                writer.append_ragged(key, Ragged(array, np.array([0, array.size])))
        writer.set_attrs({"rows": len(arrays)})
        writer.close()
    return path.read_bytes()


arrays = st.dictionaries(
    st.sampled_from(["input_ids", "labels", "loss_mask", "position_ids", "x/y"]),
    st.one_of(
        hnp.arrays(st.sampled_from(DTYPES), st.integers(0, 300)),
        hnp.arrays(np.dtype("int32"), st.tuples(st.integers(0, 4), st.integers(1, 16))),
    ),
    min_size=1,
    max_size=4,
)


@settings(max_examples=40, deadline=None)
@given(arrays)
def test_the_files_are_byte_identical_to_h5pys_and_read_back_the_same(tmp_path_factory, arrays):
    folder = tmp_path_factory.mktemp("whole")
    ours = _write(folder / "ours.h5", arrays, through_h5py=False)
    theirs = _write(folder / "theirs.h5", arrays, through_h5py=True)
    assert ours == theirs
    with h5py.File(folder / "ours.h5", "r") as f:
        for key, array in arrays.items():
            stored = f[key]
            assert stored.chunks is None  # contiguous
            assert stored.dtype == array.dtype
            np.testing.assert_array_equal(stored[()], array)


def test_a_non_contiguous_array_is_written_as_its_values(tmp_path):
    rows = np.arange(60, dtype=np.int32).reshape(6, 10)[:, ::2]  # a strided view
    writer = H5Writer(str(tmp_path / "f.h5"))
    writer.append_fixed("input_ids", rows)
    writer.close()
    with h5py.File(tmp_path / "f.h5", "r") as f:
        np.testing.assert_array_equal(f["input_ids"][()], rows)
