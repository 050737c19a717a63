"""The batches of several JSONL inputs as one stream, each input's batches between two markers.

The cache stage runs one read-ahead thread and one encode pool over this stream, so the next
input is read, parsed and encoded while the last batches of the one before are written and its
outputs closed; one input after another, each with read-ahead threads of its own, left the
cores idle at every input's start and end (measured in docs/performance.md, "Inputs in one
stream").

For each input, in order: ``Opened`` (before its file is opened), its ``LineBatch``es, then
``Read`` once the reader is through it (its sha256 is final then). An input that cannot be read
raises where its batches would be, after every item of the inputs before it.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass

from pipeline_core.formats.jsonl import JsonlReader, LineBatch
from pipeline_core.stages.options import CacheOptions


@dataclass(frozen=True)
class CacheInput:
    """One JSONL input of the cache stage. ``source_sha256``: its sha256 when the caller took it
    already (the file is then not hashed again while it is read); ``check_source(sha256)`` runs
    once it is read through, before any of its outputs is published, and raises to refuse it."""

    url: str
    source_sha256: str | None = None
    check_source: Callable[[str], None] | None = None


@dataclass(frozen=True)
class Opened:
    """The stream's next items are this input's batches."""

    input: CacheInput
    reader: JsonlReader


@dataclass(frozen=True)
class Read:
    """This input is read through."""

    input: CacheInput
    sha256: str


StreamItem = Opened | LineBatch | Read


def input_stream(
    inputs: Iterable[CacheInput], options: CacheOptions, storage_options: dict | None = None
) -> Iterator[StreamItem]:
    for one in inputs:
        reader = JsonlReader(
            one.url,
            options.batch_size,
            storage_options,
            options.max_row_bytes,
            options.batch_bytes,
            hashes=not one.source_sha256,
        )
        yield Opened(one, reader)
        yield from reader
        yield Read(one, one.source_sha256 or reader.sha256)
