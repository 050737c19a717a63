"""H5Writer.data_keys, from the datasets it made, is ``formats.h5.data_keys`` of the file it wrote."""

from __future__ import annotations

import h5py
import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats.h5 import data_keys
from pipeline_core.formats.h5_writer import H5Writer
from pipeline_core.formats.ragged import Ragged

names = st.text(st.characters(blacklist_characters="/.\x00", blacklist_categories=("Cs",)), min_size=1, max_size=10)
keys = st.lists(names | names.map(lambda n: n + "_offsets") | st.sampled_from(["a/b", "a/c_offsets"]), max_size=6)


@settings(max_examples=60, deadline=None)
@given(keys, st.booleans())
def test_the_writers_keys_are_the_files(tmp_path_factory, keys, ragged):
    path = tmp_path_factory.mktemp("keys") / "f.h5"
    writer = H5Writer(str(path))
    for key in dict.fromkeys(keys):
        if ragged and not key.endswith("_offsets") and key + "_offsets" not in keys:
            writer.append_ragged(key, Ragged(np.arange(3, dtype=np.int32), np.array([0, 3])))
        else:
            writer.append_fixed(key, np.zeros((2, 2), np.int32))
    ours = writer.data_keys()
    writer.close()
    with h5py.File(path, "r") as f:
        assert ours == data_keys(f)
