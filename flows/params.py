"""Flow parameters: pydantic models, so the Prefect UI renders them as forms and bad input
is rejected with the name of the field.

Secrets never live in parameters as plain text: S3 keys come from the environment (as s3fs
reads them), a named AWS profile, or ``SecretStr`` fields that are masked wherever the
parameters are shown or saved (``h5pipe-run.json`` holds the redacted form).
"""

from __future__ import annotations

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, SecretStr, field_validator, model_validator

from pipeline_core.formats.jsonl import BATCH_BYTES, BATCH_ROWS
from pipeline_core.processors.build import ProcessorSpec, TokenizerSpec


class StorageOptions(BaseModel):
    """How to reach object storage. Empty for local paths; s3fs also reads AWS_* variables."""

    model_config = ConfigDict(extra="forbid")

    endpoint_url: str | None = Field(None, description="S3-compatible endpoint, e.g. http://127.0.0.1:9000")
    profile: str | None = Field(None, description="AWS profile name from ~/.aws/credentials")
    key: SecretStr | None = Field(None, description="access key id; prefer the environment")
    secret: SecretStr | None = Field(None, description="secret access key; prefer the environment")
    anon: bool = False
    connect_timeout: float | None = Field(None, gt=0, description="seconds; small values make S3 faults surface fast")
    read_timeout: float | None = Field(None, gt=0)
    max_attempts: int | None = Field(None, ge=1, description="botocore's own retry attempts per request")

    def to_fsspec(self) -> dict:
        """The keyword arguments fsspec/s3fs take (secrets unwrapped; never log this)."""
        options: dict = {}
        if self.endpoint_url:
            options["endpoint_url"] = self.endpoint_url
        if self.profile:
            options["profile"] = self.profile
        if self.key:
            options["key"] = self.key.get_secret_value()
        if self.secret:
            options["secret"] = self.secret.get_secret_value()
        if self.anon:
            options["anon"] = True
        config = {
            k: v for k, v in (("connect_timeout", self.connect_timeout), ("read_timeout", self.read_timeout)) if v
        }
        if self.max_attempts:
            config["retries"] = {"max_attempts": self.max_attempts, "mode": "standard"}
        if config:
            options["config_kwargs"] = config
        return options


class TokenizerParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    path: str = Field(..., description="tokenizer.json or a folder holding it (and tokenizer_config.json)")
    eos_token: str | None = None
    bos_token: str | None = None
    pad_token: str | None = None
    backend: Literal["auto", "tokenizers", "gigatoken"] = "auto"

    def spec(self) -> TokenizerSpec:
        return TokenizerSpec(self.path, self.eos_token, self.bos_token, self.pad_token, self.backend)


class RunOptions(BaseModel):
    """Execution settings shared by the flows; they do not change outputs, so not cache keys."""

    model_config = ConfigDict(extra="forbid")

    task_runner: Literal["threads", "processes", "dask"] = "threads"
    max_workers: int = Field(2, ge=1, description="concurrent chunks (threads or processes)")
    dask_address: str | None = Field(None, description="scheduler address; a LocalCluster when empty")
    dask_workers: Literal["threads", "processes"] = Field(
        "threads",
        description="a LocalCluster's workers: threads in this process (no start-up cost; the encoders release "
        "the GIL) or processes (for Python-bound work such as a process_func); ignored with dask_address",
    )
    retries: int = Field(3, ge=0, description="retries of a chunk on transient I/O errors")
    retry_delay: float = Field(2.0, ge=0, description="first retry delay in seconds; doubles, with jitter")
    verify_hits: Literal["sha256", "size"] = Field(
        "sha256",
        description="how a cache hit's output is checked once its recorded stamp differs: read and hashed, or "
        "rebuilt without reading (size; pipeline_core/commit/standing.py)",
    )
    trust_stamps: bool = Field(
        True, description="reuse a chunk whose input's size and ETag/mtime match the manifest without rehashing it"
    )
    result_storage: str | None = Field(None, description="where task results live; default: beside the outputs")
    lock_timeout: float = Field(
        0, ge=0, description="seconds to wait for another run's lock on the output folder (0: fail at once)"
    )
    storage: StorageOptions = Field(default_factory=StorageOptions)


def absolute(url: str) -> str:
    """A local path made absolute (``~`` expanded) where the parameters are read; URLs as given.
    A relative path went into the manifest as it was, so a rerun from another folder recomputed
    every chunk and could remove files outside its output folder."""
    return url if "://" in url else os.path.abspath(os.path.expanduser(url))


class ExportParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    source: str = Field(..., description="hub id, local file/folder, fsspec URL, or dataset_info YAML/JSON")
    output: str = Field(..., description="folder URL for the JSONL chunks")
    prefix: str = Field("train", pattern=r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
    chunk_size: int = Field(1_000_000, gt=0)
    split: str = "train"
    subset: str | None = Field(None, description="a hub dataset's config name")
    converter: str | None = Field(None, description="alpaca | sharegpt | pair | messages | text ... (one dataset)")
    datasets: list[str] | None = Field(None, description="dataset_info: the entries to export (default all)")
    dataset_dir: str | None = Field(None, description="dataset_info: the folder relative paths resolve against")
    dataset_info: bool | None = Field(None, description="read the source as a dataset_info (default: by content)")
    total: int | None = Field(None, gt=0, description="dataset_info: rows in the mixed output")
    limit: int | None = Field(None, gt=0, description="export only the first N rows (a trial run)")
    streaming: bool = False
    seed: int = Field(0, ge=0)
    process_func: str | None = Field(None, description="'module:function' applied to each row")
    process_func_version: str = Field(
        "", description="bump when code the process_func imports changes (its own module file is hashed)"
    )
    on_error: Literal["skip", "raise"] = "skip"
    overwrite: bool = Field(False, description="replace outputs written with other settings")
    run: RunOptions = Field(default_factory=RunOptions)

    @field_validator("output")
    @classmethod
    def _absolute_output(cls, value: str) -> str:
        return absolute(value)

    @field_validator("datasets", mode="before")
    @classmethod
    def _comma_list(cls, value):
        return [n.strip() for n in value.split(",") if n.strip()] if isinstance(value, str) else value

    def source_options(self) -> dict:
        """The ``open_source`` options besides split/streaming/seed that are set (empty by default)."""
        keys = ("subset", "converter", "datasets", "dataset_dir", "dataset_info", "total", "limit")
        return {k: getattr(self, k) for k in keys if getattr(self, k) is not None}


MASK_CONTROLS = {
    "train_on_prompt": "sft",
    "train_on_eos": "sft",
    "train_roles": "sft",
    "add_bos": "pt",
    "add_eos": "pt",
}


class CacheParams(BaseModel):
    model_config = ConfigDict(extra="forbid")

    input: str | list[str] | None = Field(
        None, description="a JSONL file, a folder of JSONL chunks, or a list of files (pipeline: the export output)"
    )
    output: str = Field(..., description="folder URL for the HDF5 files")
    tokenizer: TokenizerParams
    processor: str = Field("pt", description="pt | sft | dpo (or a registered custom processor)")
    strategy: str | None = Field(None, description="chatml | alpaca | template | ...; default per processor")
    strategy_kwargs: dict = Field(default_factory=dict)
    processor_kwargs: dict = Field(default_factory=dict, description="e.g. converter, train_on, media")
    train_on_prompt: bool = Field(False, description="sft: train on every token, the prompt's too")
    train_on_eos: Literal["turn", "last", "none"] = Field(
        "turn", description="sft: end-of-turn tokens trained on every turn, the last one only, or none"
    )
    train_roles: list[Literal["system", "user", "assistant", "tool"]] = Field(
        ["assistant"], min_length=1, description="sft: whose turns are trained (other roles' turns weigh 1)"
    )
    add_bos: bool = Field(False, description="pt: start every document with the tokenizer's bos")
    add_eos: bool = Field(True, description="pt: end every document with eos (what Megatron's append-eod option does)")
    pack_size: int = Field(0, ge=0, description="0 = no packing")
    pad_value: int | None = None
    packing: Literal["concat", "bfd"] = Field(
        "concat", description="concat: stream documents end to end; bfd: whole samples, best fit"
    )
    bfd_window: int = Field(1000, gt=0, description="samples considered at once by bfd (bounds memory)")
    output_format: Literal["hdf5", "megatron", "both", "mindspeed"] = Field(
        "hdf5", description="mindspeed: MindSpeed-LLM's _packed_{input_ids,attention_mask,labels}_document"
    )
    json_keys: list[str] | None = Field(
        None, description="pt: the JSON keys to tokenize, as Megatron's --json-keys (default text); one dataset each"
    )
    split_sentences: bool = Field(False, description="pt only: one item per sentence, document boundaries kept")
    normalizer: bool = False
    normalizer_rules: dict[str, str] = Field(default_factory=dict)
    max_length: int | None = Field(None, gt=0)
    overflow: Literal["drop", "truncate"] = "drop"
    on_error: Literal["skip", "raise"] = "skip"
    max_error_rate: float | None = Field(
        None, ge=0, le=1, description="fail a chunk quarantining more rows than this share"
    )
    max_row_bytes: int | None = Field(32 << 20, gt=0, description="longer lines are quarantined unparsed")
    min_samples: int = Field(1, ge=0, description="fail a run writing fewer samples (0: an empty run succeeds)")
    batch_size: int = Field(BATCH_ROWS, gt=0, description="a batch ends after this many rows")
    batch_bytes: int | None = Field(
        BATCH_BYTES, gt=0, description="... or before this many bytes of JSON: the stage's memory follows it"
    )
    limit: int | None = Field(None, gt=0, description="cache only the first N input chunks (a trial run)")
    val_size: float | None = Field(
        None,
        gt=0,
        description="validation rows: a fraction (< 1) or a count; writes OUTPUT/train and OUTPUT/validation",
    )
    shuffle: bool = Field(False, description="permute the rows across all chunks (seeded) before packing")
    seed: int = Field(0, ge=0, description="seed of the validation draw and the shuffle")
    shuffle_bucket_bytes: int = Field(
        256 << 20, gt=0, description="shuffle: rows held in memory at once, in bytes of JSON (one bucket)"
    )
    overwrite: bool = Field(False, description="replace outputs written with other settings")
    compression: Literal["gzip", "lzf"] | None = Field(
        None, description="HDF5 compression filter (docs/performance.md)"
    )
    position_ids: Literal["stored", "derived"] = Field(
        "stored",
        description="packed HDF5: store position_ids per token, or derive them from cu_seqlens on read "
        "(smaller files; load_h5 and H5Dataset give the same values; docs/formats.md)",
    )
    run: RunOptions = Field(default_factory=RunOptions)

    @field_validator("input", "output")
    @classmethod
    def _absolute_paths(cls, value):
        if isinstance(value, list):
            return [absolute(v) for v in value]
        return None if value is None else absolute(value)

    @field_validator("processor")
    @classmethod
    def _known_processor(cls, value: str) -> str:
        from pipeline_core.processors import ProcessorFactory

        if value not in ProcessorFactory.names():
            raise ValueError(f"unknown processor {value!r}; choose one of {', '.join(ProcessorFactory.names())}")
        return value

    @model_validator(mode="after")
    def _mask_controls_fit_the_processor(self):
        for name in self.mask_controls():
            if self.processor != MASK_CONTROLS[name]:
                raise ValueError(f"{name} applies to the {MASK_CONTROLS[name]} processor, not {self.processor!r}")
        return self

    def mask_controls(self) -> dict:
        """The mask controls set away from their defaults: processor keyword arguments."""
        fields = type(self).model_fields
        return {n: getattr(self, n) for n in MASK_CONTROLS if getattr(self, n) != fields[n].default}

    @model_validator(mode="after")
    def _input_given(self):
        if not self.input:
            raise ValueError("input is required: a JSONL file, a folder of chunks, or a list of files")
        return self

    @field_validator("val_size")
    @classmethod
    def _whole_count(cls, value: float | None) -> float | None:
        if value is not None and value >= 1 and value != int(value):
            raise ValueError(f"val_size is a fraction below 1 or a whole count of rows, got {value}")
        return value

    @model_validator(mode="after")
    def _json_keys_fit(self):
        if self.json_keys is None:
            return self
        if self.processor != "pt":
            raise ValueError(f"json_keys names pretraining text fields; the {self.processor} processor reads its own")
        if len(self.json_keys) > 1 and (self.pack_size or self.split_sentences):
            raise ValueError("several json_keys are tokenized apart: use pack_size=0 and split_sentences=False")
        return self

    def build_processor(self):
        """Load the tokenizer and build the processor: a ConfigError (a strategy's marker the
        tokenizer lacks, a bad template...) surfaces here, before any flow or task starts."""
        from pipeline_core.processors.build import build_processor, load_tokenizer

        return build_processor(self.processor_spec(), load_tokenizer(self.tokenizer.spec()))

    def processor_spec(self) -> ProcessorSpec:
        kwargs = dict(self.processor_kwargs)
        if self.json_keys:
            kwargs["text_keys"] = list(self.json_keys)
        return ProcessorSpec(
            self.processor,
            self.strategy,
            dict(self.strategy_kwargs),
            {**kwargs, **self.mask_controls()},
            self.normalizer,
            dict(self.normalizer_rules),
            self.max_length,
            self.overflow,
        )


class PipelineParams(BaseModel):
    """Export then cache: the cache stage reads what the export stage wrote."""

    model_config = ConfigDict(extra="forbid")

    export: ExportParams
    cache: CacheParams

    @model_validator(mode="before")
    @classmethod
    def _cache_reads_export_output(cls, data):
        if isinstance(data, dict) and isinstance(data.get("cache"), dict) and isinstance(data.get("export"), dict):
            output, given = data["export"].get("output"), data["cache"].get("input")
            same = given is None or output is None or _folder(given) == _folder(output)
            if not same:
                raise ValueError(
                    f"cache.input is {given!r}, but in a pipeline the cache stage reads what the export wrote "
                    f"(export.output {output!r}); remove cache.input, or run the cache flow on its own"
                )
            data["cache"].setdefault("input", output)
        return data


def _folder(url) -> str:
    return absolute(str(url)).rstrip("/")


def redacted(params: BaseModel) -> dict:
    """JSON-ready parameters with every secret masked (SecretStr dumps as '**********')."""
    return params.model_dump(mode="json")
