"""CacheOptions: how the cache stage writes a chunk (packing, output format, error policy, batch
bounds), checked at construction so impossible combinations fail before any task runs.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal, get_args

from pipeline_core.commit.quarantine import check_max_error_rate
from pipeline_core.errors import ConfigError
from pipeline_core.formats.jsonl import BATCH_BYTES, BATCH_ROWS, check_batch_bounds
from pipeline_core.formats.positions import PositionIds
from pipeline_core.packing.stage import Packing

BATCH_SIZE = BATCH_ROWS
MAX_ROW_BYTES = 32 << 20
OutputFormat = Literal["hdf5", "megatron", "both", "mindspeed"]


@dataclass(frozen=True, slots=True)
class CacheOptions:
    """How the cache stage writes a chunk: packing, output format, error policy and batch bounds.

    ``pack_size=0`` writes one sample per item; ``pack_size>0`` packs (``packing="concat"`` or
    ``"bfd"``) with ``pad_value`` (default: the tokenizer's pad id). ``on_error`` is ``"skip"``
    (quarantine and count) or ``"raise"``; ``max_error_rate`` fails a chunk whose share of rejected
    rows is higher. Impossible combinations are a ``ConfigError`` at construction.
    """

    pack_size: int = 0
    pad_value: int | None = None
    on_error: str = "skip"
    batch_size: int = BATCH_SIZE
    output_format: OutputFormat = "hdf5"
    packing: Packing = "concat"
    bfd_window: int = 1000  # samples sorted and placed together by bfd; memory grows with it
    split_sentences: bool = False
    sentence_splitter: str = "blingfire"
    max_row_bytes: int | None = MAX_ROW_BYTES  # longer lines: row_too_large, never parsed
    max_error_rate: float | None = None  # share of quarantined rows that fails the chunk
    batch_bytes: int | None = BATCH_BYTES  # a batch also ends at this many bytes of JSON (see JsonlReader)
    compression: str | None = None  # HDF5 filter: gzip or lzf (recorded in the 'compression' attribute)
    position_ids: PositionIds = "stored"  # packed HDF5: per token, or derived from cu_seqlens on read
    # pt batches encoded at once (stages/encode_ahead.py); None: H5PIPE_ENCODE_AHEAD or its default
    encode_width: int | None = None

    def __post_init__(self) -> None:
        check_max_error_rate(self.max_error_rate)
        check_batch_bounds(self.batch_size, self.batch_bytes)
        if self.max_row_bytes is not None and self.max_row_bytes <= 0:
            raise ConfigError(f"max_row_bytes must be positive or None (no limit), got {self.max_row_bytes}")
        _choice("output_format", self.output_format, get_args(OutputFormat))
        _choice("packing", self.packing, get_args(Packing))
        _choice("compression", self.compression, (None, "gzip", "lzf"))
        if self.encode_width is not None and self.encode_width < 1:
            raise ConfigError(f"encode_width must be at least 1 (one batch at a time) or None, got {self.encode_width}")
        if self.bfd_window <= 0:
            raise ConfigError(f"bfd_window must be positive, got {self.bfd_window}; 1000 is a good default")
        if self.output_format == "mindspeed" and self.split_sentences:
            raise ConfigError("output_format 'mindspeed' is MindSpeed's instruction layout; sentences go to 'megatron'")
        if self.packed and self.packing == "bfd" and self.output_format == "both":
            raise ConfigError(
                "packing='bfd' drops or cuts the samples longer than pack_size, and they would be missing from "
                "the Megatron files too (Megatron builds its own samples at load time): use packing='concat', "
                "which keeps every token, or write the Megatron files in a run of their own "
                "(output_format='megatron', pack_size=0)"
            )
        if self.packed and self.output_format == "megatron":
            raise ConfigError(
                "packing applies to the HDF5 output and Megatron builds its own samples at load time: "
                "use output_format='both' or pack_size=0"
            )
        _choice("position_ids", self.position_ids, get_args(PositionIds))
        if self.position_ids == "derived" and not self.packed:
            raise ConfigError(
                "position_ids='derived' applies to packed HDF5 output (pack_size > 0); unpacked files store no "
                "position ids: leave position_ids at 'stored' or set pack_size"
            )
        if self.packed and self.split_sentences:
            raise ConfigError("sentence items are not packed: use split_sentences=False or pack_size=0")

    @property
    def packed(self) -> bool:
        return self.pack_size > 0

    @property
    def writes_hdf5(self) -> bool:
        return self.output_format in ("hdf5", "both")

    @property
    def writes_megatron(self) -> bool:
        """Megatron-style .bin/.idx files (Megatron's names, or MindSpeed's layout)."""
        return self.output_format in ("megatron", "both", "mindspeed")


def _choice(name: str, value, choices: tuple) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is unknown; choose one of {', '.join(map(repr, choices))}")
