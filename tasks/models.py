"""What tasks take and return: small pydantic records, never tensors or user objects.

Results are persisted as JSON (no pickles) so a cached result can be read back by any later run.
"""

from __future__ import annotations

from pydantic import BaseModel, Field

from pipeline_core.commit.standing import Published
from pipeline_core.formats.jsonl import BATCH_BYTES, BATCH_ROWS

# compression and position_ids: keyed below, only away from their defaults
UNKEYED_OPTIONS = ("batch_size", "batch_bytes", "max_error_rate", "compression", "position_ids", "encode_width")


class CacheJob(BaseModel):
    """Everything one cache task needs, in plain data (picklable for process and Dask runners)."""

    input_url: str
    output_dir: str
    tokenizer: dict
    processor: dict
    tokenizer_fingerprint: str
    # digest of the built processor's describe(): what its settings resolve to (a chat template's
    # text and kwargs, the markers a strategy found in the tokenizer), which the spec alone does not say
    processor_digest: str = ""
    pack_size: int = 0
    pad_value: int | None = None
    packing: str = "concat"
    bfd_window: int = 1000
    output_format: str = "hdf5"
    split_sentences: bool = False
    on_error: str = "skip"
    max_error_rate: float | None = None
    max_row_bytes: int | None = 32 << 20
    batch_size: int = BATCH_ROWS
    batch_bytes: int | None = BATCH_BYTES
    compression: str | None = None
    position_ids: str = "stored"
    endpoint: str | None = None  # part of the output's identity; credentials are not
    encode_width: int | None = None  # how the run shares the cores (flows/runners.py); never keyed

    def cache_options(self) -> dict:
        """Keyword arguments of pipeline_core's CacheOptions."""
        return {
            "pack_size": self.pack_size,
            "pad_value": self.pad_value,
            "on_error": self.on_error,
            "batch_size": self.batch_size,
            "batch_bytes": self.batch_bytes,
            "output_format": self.output_format,
            "packing": self.packing,
            "bfd_window": self.bfd_window,
            "split_sentences": self.split_sentences,
            "max_error_rate": self.max_error_rate,
            "max_row_bytes": self.max_row_bytes,
            "compression": self.compression,
            "position_ids": self.position_ids,
            "encode_width": self.encode_width,
        }

    def settings(self) -> dict:
        """What every output of the run depends on besides its input: tokenizer, settings, format."""
        from pipeline_core.version import FORMAT_VERSION

        return {
            "tokenizer": self.tokenizer_fingerprint,
            "processor": self.processor,
            "processor_resolved": self.processor_digest,
            # batch bounds and the error-rate limit never change what a file holds
            **{k: v for k, v in self.cache_options().items() if k not in UNKEYED_OPTIONS},
            **({"compression": self.compression} if self.compression else {}),  # None: keys as before it existed
            **({"position_ids": self.position_ids} if self.position_ids != "stored" else {}),  # likewise
            **({"sentence_marks": "per_document"} if self._sentence_marks_moved() else {}),
            **({"bfd_truncate": "untrained_skipped"} if self._bfd_truncates() else {}),
            "format_version": FORMAT_VERSION,
        }

    def _sentence_marks_moved(self) -> bool:
        """Sentence items with bos asked for or eos turned off: until 2026-12-06 they were written
        with eos and no bos whatever the settings, so their key must differ from those files'."""
        kwargs = self.processor.get("processor_kwargs") or {}
        return self.split_sentences and (bool(kwargs.get("add_bos", False)) or not kwargs.get("add_eos", True))

    def _bfd_truncates(self) -> bool:
        """bfd cutting samples to pack_size: until 2026-12-06 one whose prompt filled the pack was
        written with no trained token (now skipped as prompt_too_long), so its key must differ."""
        return self.pack_size > 0 and self.packing == "bfd" and self.processor.get("overflow") == "truncate"

    def key_material(self, source_sha256: str, output_url: str) -> dict:
        """What one output depends on: its input's content, the settings and its destination."""
        return {**self.settings(), "source_sha256": source_sha256, "output_url": output_url, "endpoint": self.endpoint}


class ChunkDigest(BaseModel):
    url: str
    sha256: str
    size: int
    # the input's stamp taken before this sha256 (flows/plan.py), when the run trusts stamps: the cache
    # task then reads the bytes once, without hashing them again, and compares the stamp afterwards
    stamp: str | None = None


class PartFile(BaseModel):
    """A file a chunk published besides its output: its quarantine file, a Megatron .bin/.idx."""

    url: str
    sha256: str
    size: int
    stamp: str | None = (
        None  # its stamp when its sha256 was taken (tasks/hashing.py), renewed by flows/plan.py for reused chunks
    )


class Publishes(BaseModel):
    """A chunk's descriptor lists every file it published: the output and its ``parts``."""

    parts: list[PartFile] = Field(default_factory=list)

    def files(self) -> list[Published]:
        """What ``still_stands`` (pipeline_core/commit/standing.py) checks for this chunk."""
        own = Published(self.output_url, self.sha256, self.size, self.output_stamp)
        parts = [Published(p.url, p.sha256, p.size, p.stamp) for p in self.parts]
        if self.errors_url and self.errors_url not in {p.url for p in self.parts}:
            parts.append(Published(self.errors_url, "", -1))  # recorded before parts were: never stands
        return [own, *parts]


class ChunkResult(Publishes):
    """Descriptor of one written HDF5 chunk (what a cache hit returns)."""

    input_url: str
    output_url: str
    errors_url: str | None = None
    source_sha256: str
    source_stamp: str | None = None  # the input's stamp when it was hashed (flows/plan.py)
    output_stamp: str | None = (
        None  # the output's stamp when its sha256 was taken (tasks/), renewed by flows/plan.py for reused chunks
    )
    sha256: str
    size: int
    rows_read: int
    samples_written: int
    rows_skipped: int
    skipped: dict[str, int] = Field(default_factory=dict)
    rows_written: int | None = None  # None in results cached before rows and samples were counted apart
    samples_dropped: int = 0  # turns dropped from written rows (rewritten="per_turn")
    dropped: dict[str, int] = Field(default_factory=dict)
    rows_truncated: int = 0
    tokens_written: int = 0
    packs: int = 0
    pack_fill: float | None = None
    lower_bound_packs: int = 0
    # concat packs with no trained token (pipeline_core.packing.stage.ConcatStage); None in results
    # cached before they were counted
    untrained_packs: int | None = None
    seconds: float = 0.0
    # reused from the manifest inside a task (tasks/cache.py cache_many): counted as cached, never stored
    resumed: bool = Field(False, exclude=True)


class ExportJob(BaseModel):
    """One export run's settings, in plain data (the source is reopened where the task runs)."""

    source: str
    output_dir: str
    prefix: str = "train"
    chunk_size: int = 1_000_000
    split: str = "train"
    streaming: bool = False
    seed: int = 0
    process_func: str | None = None
    process_func_version: str = ""  # the user's version of code the process_func imports
    on_error: str = "skip"
    source_fingerprint: str = ""
    process_func_hash: str = ""
    source_kwargs: dict = Field(default_factory=dict)  # other open_source options (datasets, total...)

    def source_options(self) -> dict:
        return {"split": self.split, "streaming": self.streaming, "seed": self.seed, **self.source_kwargs}

    def settings(self) -> dict:
        """What shapes every chunk besides the data itself (a new dataset version is not drift)."""
        return {
            "prefix": self.prefix,
            "chunk_size": self.chunk_size,
            "split": self.split,
            "seed": self.seed,
            "process_func": self.process_func_hash,
            "on_error": self.on_error,
            **({"source_options": self.source_kwargs} if self.source_kwargs else {}),
            # only when given, so folders exported before it existed keep their config hash
            **({"process_func_version": self.process_func_version} if self.process_func_version else {}),
        }


class ExportChunkResult(Publishes):
    """Descriptor of one written JSONL chunk."""

    index: int
    output_url: str
    rows_in: int
    rows_out: int
    rows_filtered: int = 0
    rows_failed: int = 0
    failed: dict[str, int] = Field(default_factory=dict)
    errors_url: str | None = None
    dataset_rows: dict[str, int] = Field(default_factory=dict)
    sha256: str
    size: int
    seconds: float = 0.0
    source_fingerprint: str = ""  # the source it was read from, set by export_flow (flows/plan.py)
    output_stamp: str | None = (
        None  # the output's stamp when its sha256 was taken (tasks/), renewed by flows/plan.py for reused chunks
    )
