"""Which keys the HDF5 stores as uint16: token ids when the vocabulary and the pad fit, packed
position ids when the pack size fits; never masks or labels."""

from __future__ import annotations

import numpy as np

from pipeline_core.formats.keys import KeyLayout
from pipeline_core.formats.positions import position_dtype
from pipeline_core.stages.h5_sink import narrowed_keys

PT = KeyLayout({"sequence": ("sequence",)}, ())
SFT = KeyLayout({"sequence": ("sequence", "sequence_mask")}, ())
DPO = KeyLayout({"chosen": ("chosen", "chosen_mask"), "rejected": ("rejected", "rejected_mask")}, ())
U16 = np.dtype(np.uint16)


def test_unpacked_ids_narrow_when_the_vocabulary_fits():
    assert narrowed_keys(PT, 50257, 0, None) == {"sequence": U16}
    assert narrowed_keys(DPO, 65536, 0, None) == {"chosen": U16, "rejected": U16}
    assert narrowed_keys(SFT, 65537, 0, None) == {}  # Llama 3's 128256 ids stay int32


def test_packed_ids_narrow_with_their_pad_and_position_ids_with_the_pack_size():
    assert narrowed_keys(SFT, 50257, 2048, 50256) == {"sequence": U16, "position_ids": U16}
    assert narrowed_keys(DPO, 50257, 2048, 0) == {"sequence": U16, "position_ids": U16}  # packed as one layout
    assert narrowed_keys(PT, 50257, 2048, -1) == {"position_ids": U16}  # a pad of -1 would not fit
    assert narrowed_keys(PT, 200_000, 1 << 17, 0) == {}


def test_position_ids_narrow_exactly_when_the_packers_give_them_narrow():
    """The packers give uint16 position ids up to a pack size of 65536 (formats.positions): the
    file must narrow them at the same bound, or they would be stored uint16 without the
    ``narrowed`` entry that makes readers give int32."""
    for pack_size in (1, 2048, 65535, 65536, 65537, 1 << 17):
        narrowed = "position_ids" in narrowed_keys(PT, 50257, pack_size, 0)
        assert narrowed == (position_dtype(pack_size) == U16) == (pack_size <= 65536), pack_size
