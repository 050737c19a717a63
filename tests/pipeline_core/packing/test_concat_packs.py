"""DocumentConcatPacker against a token-by-token Python model: pieces, boundaries, pads, ids."""

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from pipeline_core.formats.ragged import Ragged
from pipeline_core.packing.concat import DocumentConcatPacker
from pipeline_core.packing.packs import Packs

PAD = -7


def model_rows(batches: list[list[int]], pack_size: int) -> list[list[tuple[int, int]]]:
    """Packs as lists of (document, index in document); empty documents leave no trace."""
    lengths = [n for batch in batches for n in batch if n]
    tokens = [(d, i) for d, n in enumerate(lengths) for i in range(n)]
    return [tokens[s : s + pack_size] for s in range(0, len(tokens), pack_size)]


def feed(batches: list[list[int]], pack_size: int) -> Packs:
    packer = DocumentConcatPacker(pack_size, pad_value=PAD, length_key="sequence")
    parts, doc = [], 0
    for batch in batches:
        ids = []
        for n in batch:
            ids.append(np.arange(n, dtype=np.int32) + 1000 * doc)
            doc += n > 0
        samples = {
            "sequence": Ragged.from_lists(ids),
            "loss_mask": Ragged.from_lists([a % 2 == 0 for a in ids], np.bool_),
            "weight": Ragged.from_lists([np.full(a.size, 0.5) for a in ids], np.float32),
        }
        parts.append(packer.add(samples))
    return Packs.concat([*parts, packer.flush()])


@settings(max_examples=200, deadline=None)
@given(
    batches=st.lists(st.lists(st.integers(0, 20), max_size=6), max_size=8),
    pack_size=st.integers(1, 16),
)
def test_every_piece_boundary_and_pad_matches_the_model(batches, pack_size):
    packs = feed(batches, pack_size)
    rows = model_rows(batches, pack_size)
    assert len(packs) == len(rows)
    for p, row in enumerate(rows):
        pad = pack_size - len(row)
        starts = [j for j, (d, _) in enumerate(row) if j == 0 or row[j - 1][0] != d]
        assert packs.sample_ids_of(p).tolist() == [row[j][0] for j in starts]
        assert packs.cu_seqlens_of(p).tolist() == [*starts, len(row)]
        positions = [j - max(s for s in starts if s <= j) for j in range(len(row))]
        assert packs.position_ids[p].tolist() == positions + [0] * pad
        tokens = [1000 * d + i for d, i in row]
        assert packs.arrays["sequence"][p].tolist() == tokens + [PAD] * pad
        assert packs.arrays["loss_mask"][p].tolist() == [t % 2 == 0 for t in tokens] + [False] * pad
        assert packs.arrays["weight"][p].tolist() == [0.5] * len(row) + [0.0] * pad
    assert packs.position_ids.dtype == np.uint16 and packs.cu_seqlens.dtype == np.int32  # pack_size <= 65536
    assert packs.sample_ids.dtype == np.int64 and packs.cu_offsets.dtype == np.int64


def test_flush_before_any_sample_and_after_an_exact_fit_gives_no_packs():
    assert len(DocumentConcatPacker(4, pad_value=0, length_key="sequence").flush()) == 0
    packer = DocumentConcatPacker(4, pad_value=0, length_key="sequence")
    full = packer.add({"sequence": Ragged.from_lists([[1, 2, 3], [4]])})
    assert len(full) == 1 and full.cu_seqlens.tolist() == [0, 3, 4] and full.sample_ids.tolist() == [0, 1]
    assert len(packer.flush()) == 0
