"""Chunk tails: what packing chunk by chunk costs against packing one stream, checked by packing
the chunks apart and their concatenation at once."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.concat import DocumentConcatPacker
from pipeline_core.packing.packs import Packs
from pipeline_core.packing.tails import chunk_tails
from pipeline_core.stages.h5_sink import used_tokens

chunks_of_lengths = st.lists(st.lists(st.integers(1, 50), min_size=1, max_size=10), min_size=1, max_size=12)


def concat(lengths: list[int], pack_size: int) -> Packs:
    packer = DocumentConcatPacker(pack_size, pad_value=0, length_key="sequence")
    docs = Ragged.from_lists([np.ones(n, np.int32) for n in lengths])
    return Packs.concat([packer.add({"sequence": docs}), packer.flush()])


@settings(max_examples=150, deadline=None)
@given(chunks=chunks_of_lengths, pack_size=st.integers(1, 64))
def test_tail_packs_are_what_packing_the_concatenation_saves(chunks, pack_size):
    apart = [concat(lengths, pack_size) for lengths in chunks]
    together = concat([n for lengths in chunks for n in lengths], pack_size)
    tokens = [int(used_tokens(p).sum()) for p in apart]
    tails = chunk_tails(tokens, sum(map(len, apart)), pack_size)
    assert tails.tail_packs == sum(map(len, apart)) - len(together) <= len(chunks) - 1
    assert tails.one_stream_utilisation == int(used_tokens(together).sum()) / (len(together) * pack_size)


def test_one_chunk_has_no_tails_and_many_small_ones_warn():
    assert chunk_tails([1000], 4, 256).tail_packs == 0
    many = chunk_tails([300] * 100, 200, 256)  # 2 packs each where one stream needs 118
    assert many.tail_packs == 82 and many.worth_warning
    assert not chunk_tails([], 0, 256).worth_warning
