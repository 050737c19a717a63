"""Megatron-LM indexed dataset output: write, merge and read ``{prefix}.bin`` + ``{prefix}.idx``.

Files written here load with megatron-core's ``IndexedDataset(prefix)``; the layout is described in
``format``. Pure numpy: neither torch nor megatron-core is needed to write or read.
"""

from pipeline_core.formats.megatron.format import DTYPE_CODES, IndexHeader, choose_dtype
from pipeline_core.formats.megatron.merge import merge_indexed
from pipeline_core.formats.megatron.reader import IndexedReader, check_indexed
from pipeline_core.formats.megatron.writer import IndexedWriter

__all__ = [
    "DTYPE_CODES",
    "IndexHeader",
    "IndexedReader",
    "IndexedWriter",
    "check_indexed",
    "choose_dtype",
    "merge_indexed",
]
