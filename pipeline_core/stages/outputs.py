"""Where the cache stage writes an input's outputs, and which file marks a chunk finished.

One output per input, named after it (``train_chunk_0.jsonl`` -> ``train_chunk_0.h5``, its errors
beside it as ``train_chunk_0.errors.jsonl``); inputs whose names would collide are refused before
anything is written.
"""

from __future__ import annotations

from collections.abc import Callable

from pipeline_core.errors import ConfigError
from pipeline_core.formats.megatron.output import LEVELS, megatron_name
from pipeline_core.storage.fs import join_url


def output_stem(input_url: str) -> str:
    name = str(input_url).rstrip("/").rsplit("/", 1)[-1]
    return name[: -len(".jsonl")] if name.endswith(".jsonl") else name.rsplit(".", 1)[0]


def check_unique_outputs(inputs: list[str]) -> None:
    """Refuse inputs whose outputs would share a name (``a/x.jsonl`` and ``b/x.jsonl`` both make
    ``x.h5``): one would silently overwrite the other. Checked before anything is written, so every
    accepted set of inputs has one output name per input."""
    check_unique_names(
        inputs,
        lambda url: f"{output_stem(url)}.h5",
        "in the output folder",
        "rename one of them, or cache them into separate output folders",
    )


def check_unique_names(inputs: list[str], name_of: Callable[[str], str], where: str, fix: str) -> None:
    """A ConfigError naming the first two ``inputs`` that ``name_of`` gives the same name ``where``."""
    seen: dict[str, str] = {}
    for url in inputs:
        name = name_of(url)
        if name in seen:
            raise ConfigError(f"inputs {seen[name]} and {url} would both be written as {name} {where}; {fix}")
        seen[name] = url


def output_names(input_url: str, output_dir: str) -> tuple[str, str]:
    """(HDF5 URL, errors URL) for an input: ``train_chunk_0.jsonl`` -> ``train_chunk_0.h5``."""
    stem = output_stem(input_url)
    return join_url(output_dir, f"{stem}.h5"), join_url(output_dir, f"{stem}.errors.jsonl")


def standing_output(input_url: str, output_dir: str, output_format: str, recorded: str | None = None) -> str:
    """The file whose presence marks a chunk finished: its HDF5, or with Megatron-only output the
    .idx of its first key (published after its .bin). Which keys a chunk writes shows only once it
    is written, so that .idx is the one an earlier run ``recorded`` for this input, when it has
    the right shape; otherwise the HDF5 name, which such a run never writes."""
    h5_url, _ = output_names(input_url, output_dir)
    if output_format not in ("megatron", "mindspeed") or not recorded:
        return h5_url
    stem, name = output_stem(input_url), recorded.rsplit("/", 1)[-1]
    for level in LEVELS:
        key = name[len(stem) + 1 : -len(f"_{level}.idx")]
        if (
            name.endswith(f"_{level}.idx")
            and key
            and recorded == join_url(output_dir, megatron_name(stem, key, level) + ".idx")
        ):
            return recorded
    return h5_url
