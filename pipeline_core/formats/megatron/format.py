"""The on-disk layout of Megatron-LM's indexed dataset (``{prefix}.bin`` + ``{prefix}.idx``).

Checked against megatron-core's ``megatron/core/datasets/indexed_dataset.py``. All numbers are
little-endian. The ``.bin`` holds every sequence's tokens back to back in one dtype. The ``.idx``::

    offset  size        field
    0       9           magic b"MMIDIDX\\x00\\x00"
    9       8  uint64   version, always 1
    17      1  uint8    dtype code (DTYPE_CODES)
    18      8  uint64   sequence count S
    26      8  uint64   document index count D (= number of documents + 1)
    34      4*S int32   sequence lengths, in tokens
    ..      8*S int64   sequence pointers, byte offsets into the .bin
    ..      8*D int64   document indices: 0, then the sequence index ending each document

Document ``d`` is sequences ``document_indices[d]:document_indices[d + 1]``.
"""

from __future__ import annotations

import struct
from collections.abc import Iterable
from dataclasses import dataclass
from typing import BinaryIO

import numpy as np

MAGIC = b"MMIDIDX\x00\x00"
VERSION = 1
HEADER_SIZE = 34
_HEADER = struct.Struct("<9sQBQQ")

# Megatron's DType enum: numpy scalar type -> code stored in the .idx.
DTYPE_CODES: dict[type, int] = {
    np.uint8: 1,
    np.int8: 2,
    np.int16: 3,
    np.int32: 4,
    np.int64: 5,
    np.float64: 6,
    np.float32: 7,
    np.uint16: 8,
}
_CODE_DTYPES = {code: scalar for scalar, code in DTYPE_CODES.items()}

LENGTH_DTYPE = np.dtype("<i4")
POINTER_DTYPE = np.dtype("<i8")
DOCUMENT_DTYPE = np.dtype("<i8")


def bin_path(prefix: str) -> str:
    return f"{prefix}.bin"


def idx_path(prefix: str) -> str:
    return f"{prefix}.idx"


def choose_dtype(vocab_size: int) -> type:
    """The token dtype Megatron picks for a vocabulary: uint16 below 65500 ids, else int32."""
    if int(vocab_size) <= 0:
        raise ValueError(f"vocab_size must be positive, got {vocab_size}; pass the tokenizer's vocab size")
    return np.uint16 if vocab_size < 65500 else np.int32


def token_dtype(dtype) -> np.dtype:
    """The little-endian numpy dtype for ``dtype``, if Megatron has a code for it."""
    scalar = np.dtype(dtype).type
    if scalar not in DTYPE_CODES:
        names = ", ".join(np.dtype(s).name for s in DTYPE_CODES)
        raise ValueError(f"dtype {np.dtype(dtype).name} has no Megatron code; use one of: {names}")
    return np.dtype(scalar).newbyteorder("<")


def dtype_from_code(code: int, where: str) -> np.dtype:
    if code not in _CODE_DTYPES:
        raise ValueError(f"{where}: unknown dtype code {code}; expected one of {sorted(_CODE_DTYPES)}")
    return token_dtype(_CODE_DTYPES[code])


@dataclass(frozen=True, slots=True)
class IndexHeader:
    dtype: np.dtype
    sequence_count: int
    document_index_count: int  # documents + 1

    def pack(self) -> bytes:
        code = DTYPE_CODES[self.dtype.type]
        return _HEADER.pack(MAGIC, VERSION, code, self.sequence_count, self.document_index_count)

    @classmethod
    def read(cls, path: str) -> IndexHeader:
        with open(path, "rb") as fh:
            return cls.parse(fh.read(HEADER_SIZE), path)

    @classmethod
    def parse(cls, raw: bytes, where: str) -> IndexHeader:
        """The header at the start of ``raw`` (an .idx's first bytes); ``where`` names it in errors."""
        if len(raw) < HEADER_SIZE:
            raise ValueError(f"{where}: only {len(raw)} bytes, too short for an index header; rewrite it")
        magic, version, code, sequences, documents = _HEADER.unpack(raw[:HEADER_SIZE])
        if magic != MAGIC:
            raise ValueError(f"{where}: bad magic {magic!r}, not a Megatron indexed dataset index")
        if version != VERSION:
            raise ValueError(f"{where}: index version {version}, only version {VERSION} is supported")
        return cls(dtype_from_code(code, where), sequences, documents)

    @property
    def lengths_offset(self) -> int:
        return HEADER_SIZE

    @property
    def pointers_offset(self) -> int:
        return HEADER_SIZE + self.sequence_count * LENGTH_DTYPE.itemsize

    @property
    def documents_offset(self) -> int:
        return self.pointers_offset + self.sequence_count * POINTER_DTYPE.itemsize

    @property
    def index_size(self) -> int:
        return self.documents_offset + self.document_index_count * DOCUMENT_DTYPE.itemsize


def write_index(
    fh: BinaryIO,
    header: IndexHeader,
    lengths: Iterable[np.ndarray],
    pointers: Iterable[np.ndarray],
    documents: Iterable[np.ndarray],
) -> None:
    """Write a whole .idx; each section is given as blocks so callers can stream it."""
    fh.write(header.pack())
    for blocks, dtype in ((lengths, LENGTH_DTYPE), (pointers, POINTER_DTYPE), (documents, DOCUMENT_DTYPE)):
        for block in blocks:
            fh.write(np.ascontiguousarray(block, dtype=dtype).tobytes())


def pointer_blocks(length_blocks: Iterable[np.ndarray], itemsize: int, start: int = 0):
    """Byte offsets of back-to-back sequences, block by block, continuing from ``start``."""
    for lengths in length_blocks:
        ends = start + np.cumsum(lengths, dtype=np.int64) * itemsize
        yield ends - np.asarray(lengths, dtype=np.int64) * itemsize
        if ends.size:
            start = int(ends[-1])
