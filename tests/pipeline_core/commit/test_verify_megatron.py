"""``verify`` on Megatron pairs: a pair whose index disagrees with itself or with its .bin is reported
(tests/flows/test_megatron_folder_changes.py: even when the manifest's sha256 matches it).

The pair below is written by h5pipe's IndexedWriter and read back by megatron-core's reader; each
damage is made at a byte offset counted by hand from the layout megatron-core reads (a 34-byte
header, then int32 lengths, int64 pointers, int64 document indices), and the expected message is
the one for that damage alone.
"""

from __future__ import annotations

import struct

import pytest

from pipeline_core.commit.verify import megatron_problems
from tests.pipeline_core.formats.test_megatron import _megatron_indexed_dataset, _write

# two documents: [1, 2, 3] and [4, 5] + [6]: 3 sequences of 3, 2 and 1 uint16 tokens (12 bytes)
SEQUENCES = [[1, 2, 3], [4, 5], [6]]
POINTERS_AT = 34 + 3 * 4  # after the header and three int32 lengths
DOCUMENTS_AT = POINTERS_AT + 3 * 8  # then three int64 pointers: 0, 6, 10
IDX_SIZE = DOCUMENTS_AT + 3 * 8  # then three int64 document indices: 0, 1, 3


def write_pair(prefix) -> None:
    _write(prefix, [SEQUENCES[:1], SEQUENCES[1:]])


def patch(path, offset: int, value: int) -> None:
    raw = bytearray(path.read_bytes())
    raw[offset : offset + 8] = struct.pack("<q", value)
    path.write_bytes(bytes(raw))


def test_a_sound_pair_has_no_problem_and_megatron_reads_it(tmp_path):
    write_pair(tmp_path / "x")
    assert (tmp_path / "x.idx").stat().st_size == IDX_SIZE
    assert (tmp_path / "x.bin").stat().st_size == 12
    assert megatron_problems(str(tmp_path / "x.idx")) == []
    dataset = _megatron_indexed_dataset()(str(tmp_path / "x"))
    assert [dataset[i].tolist() for i in range(len(dataset))] == SEQUENCES


def damage_bin_short(tmp_path):
    (tmp_path / "x.bin").write_bytes((tmp_path / "x.bin").read_bytes()[:10])


def damage_idx_short(tmp_path):
    (tmp_path / "x.idx").write_bytes((tmp_path / "x.idx").read_bytes()[: IDX_SIZE - 4])


def damage_pointer(tmp_path):
    patch(tmp_path / "x.idx", POINTERS_AT + 8, 8)  # the second sequence said to start at token 4


def damage_documents_back(tmp_path):
    patch(tmp_path / "x.idx", DOCUMENTS_AT + 8, 4)  # 0, 4, 3


def damage_documents_end(tmp_path):
    patch(tmp_path / "x.idx", DOCUMENTS_AT + 16, 2)  # 0, 1, 2: the last sequence in no document


def damage_magic(tmp_path):
    raw = (tmp_path / "x.idx").read_bytes()
    (tmp_path / "x.idx").write_bytes(b"NOTMEGATR" + raw[9:])


def damage_no_bin(tmp_path):
    (tmp_path / "x.bin").unlink()


@pytest.mark.parametrize(
    ("damage", "problem"),
    [
        (damage_bin_short, ".bin has 10 bytes, the index needs 12"),
        (damage_idx_short, f"index has {IDX_SIZE - 4} bytes but its header promises {IDX_SIZE} (truncated)"),
        (damage_pointer, "sequence pointers are not back to back"),
        (damage_documents_back, "document indices must not decrease"),
        (damage_documents_end, "the last document index must equal the sequence count"),
        (damage_magic, "unreadable: ValueError: x.idx: bad magic b'NOTMEGATR', not a Megatron indexed dataset index"),
        (damage_no_bin, "no x.bin beside it (a partial publish)"),
    ],
)
def test_each_damage_is_named(tmp_path, damage, problem):
    write_pair(tmp_path / "x")
    damage(tmp_path)
    assert megatron_problems(str(tmp_path / "x.idx")) == [problem]


def test_a_pair_on_s3_is_checked_the_same(tmp_path, s3_bucket):
    import s3fs

    bucket, options = s3_bucket
    fs = s3fs.S3FileSystem(**options)
    write_pair(tmp_path / "x")
    fs.put(str(tmp_path / "x.idx"), f"{bucket}/ok/x.idx")
    fs.put(str(tmp_path / "x.bin"), f"{bucket}/ok/x.bin")
    assert megatron_problems(f"{bucket}/ok/x.idx", options) == []
    damage_pointer(tmp_path)
    fs.put(str(tmp_path / "x.idx"), f"{bucket}/bad/x.idx")
    fs.put(str(tmp_path / "x.bin"), f"{bucket}/bad/x.bin")
    assert megatron_problems(f"{bucket}/bad/x.idx", options) == ["sequence pointers are not back to back"]
