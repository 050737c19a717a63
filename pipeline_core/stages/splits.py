"""Train/validation splits and a global shuffle of JSONL rows, before the cache stage tokenizes
and packs them.

``prepare_splits(inputs, work_dir, SplitOptions(val_size, seed, shuffle))`` reads the input
chunks' lines (raw bytes, never parsed: a bad row still reaches the cache stage's quarantine)
and writes new JSONL shards per split under ``work_dir/{train,validation}/``; the cache stage
then runs over each split's shards as usual.

- Rows are numbered globally: input chunks in the order given, lines in file order, blank lines
  not counted. Blank (or whitespace-only) lines hold no row and are left out of the shards; how
  many were left out is ``PreparedSplits.blank_lines`` (the cache stage would have counted each
  as a ``blank_line`` error). A row is a sample (a split-sentence document stays whole in one split).
- ``val_size``: below 1 a fraction of the rows, rounded up as ``datasets.train_test_split`` does;
  from 1 on a count. Which rows go to validation is a seeded draw without replacement over the
  global row numbers, so the same inputs and seed give the same split on any machine and chunking.
- ``shuffle``: a uniformly random permutation spanning all chunks, in two passes with bounded
  memory: every row goes to one of ``ceil(bytes / bucket_bytes)`` bucket files drawn at random
  (seeded), then each bucket is read back alone, permuted (seeded) and written as one shard.
  Memory holds one bucket (about ``bucket_bytes``) at a time, whatever the data size.
- Without ``shuffle`` rows keep their order, and shard ``{split}/{chunk stem}.jsonl`` holds the rows
  of that input chunk which fell to the split; inputs of the same name in different folders are
  refused before anything is written (one shard would overwrite the other).

A shard whose bytes equal the existing file is not rewritten, so a rerun keeps its stamps and the
cache stage reuses the chunks it already made.
"""

from __future__ import annotations

import math
import os
import posixpath
import tempfile
from collections.abc import Iterator, Sequence
from dataclasses import dataclass

import numpy as np

from pipeline_core.errors import ConfigError
from pipeline_core.stages.outputs import check_unique_names
from pipeline_core.storage.fs import is_local, join_url, publish, url_to_fs
from pipeline_core.storage.hashing import file_digest

SPLITS = ("train", "validation")
BUCKET_BYTES = 256 << 20
VAL_STREAM, BUCKET_STREAM, PERMUTE_STREAM = 11, 12, 13  # seed streams, so each draw is independent


@dataclass(frozen=True, slots=True)
class SplitOptions:
    """``val_size`` (None: no validation split), ``seed``, ``shuffle`` and the shuffle's bucket size."""

    val_size: float | None = None
    seed: int = 0
    shuffle: bool = False
    bucket_bytes: int = BUCKET_BYTES

    def __post_init__(self) -> None:
        v = self.val_size
        if v is not None and (isinstance(v, bool) or not v > 0 or (v >= 1 and v != int(v))):
            raise ConfigError(f"val_size must be a fraction in (0, 1) or a whole count >= 1, got {v!r}")
        if self.bucket_bytes < 1:
            raise ConfigError(f"bucket_bytes must be positive, got {self.bucket_bytes}")

    def validation_count(self, rows: int) -> int:
        """How many of ``rows`` go to validation; an error when that leaves either split empty."""
        if self.val_size is None:
            return 0
        count = math.ceil(self.val_size * rows) if self.val_size < 1 else int(self.val_size)
        if not 0 < count < rows:
            raise ConfigError(
                f"val_size={self.val_size} gives {count} validation rows of {rows}; both splits need rows: "
                "use a smaller val_size or more data"
            )
        return count


@dataclass(frozen=True, slots=True)
class PreparedSplits:
    """The shards written per split, each split's row count, and the blank lines left out."""

    shards: dict[str, list[str]]
    rows: dict[str, int]
    blank_lines: int = 0


def prepare_splits(
    inputs: Sequence[str], work_dir: str, options: SplitOptions, storage_options: dict | None = None
) -> PreparedSplits:
    """Write the split (and, with ``shuffle``, permuted) shards of ``inputs`` under ``work_dir``."""
    if not options.shuffle:  # shards are named after their input then (shuffled ones are numbered)
        check_unique_names(
            list(inputs),
            lambda url: _stem(url) + ".jsonl",
            f"in each split's folder under {work_dir}",
            "rename one of them, or shuffle the rows (shuffled shards are numbered)",
        )
    counted = [count_lines(u, storage_options) for u in inputs]
    counts = [rows for rows, _ in counted]
    total = sum(counts)
    validation = validation_rows(total, options)
    splits = SPLITS if options.val_size is not None else SPLITS[:1]
    with tempfile.TemporaryDirectory(prefix="h5pipe-splits-") as tmp:
        if options.shuffle:
            size = sum(_size(u, storage_options) for u in inputs)
            share = {"validation": len(validation) / max(total, 1), "train": 1 - len(validation) / max(total, 1)}
            buckets = {s: max(1, math.ceil(size * share[s] / options.bucket_bytes)) for s in SPLITS}
            written = _shuffled(inputs, counts, validation, buckets, options.seed, tmp, storage_options)
        else:
            written = _in_order(inputs, validation, tmp, storage_options)
        shards = {s: _publish_split(written[s], join_url(work_dir, s), storage_options) for s in splits}
    rows = {"validation": len(validation), "train": total - len(validation)} if options.val_size else {"train": total}
    return PreparedSplits(shards, rows, sum(blank for _, blank in counted))


def validation_rows(total: int, options: SplitOptions) -> np.ndarray:
    """The sorted global row numbers that go to validation (a seeded draw without replacement)."""
    count = options.validation_count(total)
    if not count:
        return np.zeros(0, dtype=np.int64)
    rng = np.random.default_rng([options.seed, VAL_STREAM])
    return np.sort(rng.choice(total, size=count, replace=False).astype(np.int64))


def count_rows(url: str, storage_options: dict | None = None) -> int:
    """Non-blank lines of a JSONL file (one streaming pass)."""
    return count_lines(url, storage_options)[0]


def count_lines(url: str, storage_options: dict | None = None) -> tuple[int, int]:
    """(non-blank lines, blank or whitespace-only lines) of a JSONL file, in one streaming pass."""
    rows = blank = 0
    fs, path = url_to_fs(url, storage_options)
    with fs.open(path, "rb") as f:
        for line in f:
            if line.strip():
                rows += 1
            else:
                blank += 1
    return rows, blank


def iter_lines(url: str, storage_options: dict | None = None) -> Iterator[bytes]:
    """The file's non-blank lines, each ending in one newline."""
    fs, path = url_to_fs(url, storage_options)
    with fs.open(path, "rb") as f:
        for line in f:
            if line.strip():
                yield line if line.endswith(b"\n") else line + b"\n"


def _in_order(inputs, validation: np.ndarray, tmp: str, storage_options) -> dict[str, list[str]]:
    written: dict[str, list[str]] = {s: [] for s in SPLITS}
    start = 0
    for url in inputs:
        name = _stem(url) + ".jsonl"
        paths = {s: os.path.join(tmp, s, name) for s in SPLITS}
        for path in paths.values():
            os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(paths["train"], "wb") as train, open(paths["validation"], "wb") as val:
            for g, line in enumerate(iter_lines(url, storage_options), start):
                (val if _is_in(validation, g) else train).write(line)
                start = g + 1
        for s in SPLITS:
            written[s].append(paths[s])
    return written


def _shuffled(
    inputs, counts, validation, buckets: dict[str, int], seed: int, tmp: str, storage_options
) -> dict[str, list[str]]:
    """Pass 1: rows to random bucket files per split (``buckets[split]`` of them, each about
    ``bucket_bytes``); pass 2: each bucket permuted into a shard."""
    files = {s: [os.path.join(tmp, f"{s}.bucket_{b}") for b in range(buckets[s])] for s in SPLITS}
    handles = {s: [open(p, "wb") for p in paths] for s, paths in files.items()}  # noqa: SIM115 - closed below
    try:
        start = 0
        for i, (url, n) in enumerate(zip(inputs, counts)):
            rng = np.random.default_rng([seed, BUCKET_STREAM, i])
            draws = {s: rng.integers(buckets[s], size=n) for s in SPLITS}
            for k, line in enumerate(iter_lines(url, storage_options)):
                split = "validation" if _is_in(validation, start + k) else "train"
                handles[split][int(draws[split][k])].write(line)
            start += n
    finally:
        for group in handles.values():
            for handle in group:
                handle.close()
    written: dict[str, list[str]] = {s: [] for s in SPLITS}
    for s in SPLITS:
        os.makedirs(os.path.join(tmp, s), exist_ok=True)
        for b, path in enumerate(files[s]):
            written[s].append(_permute_bucket(path, os.path.join(tmp, s, f"{s}_shuffled_{b}.jsonl"), seed, s, b))
    return written


def _permute_bucket(bucket: str, out: str, seed: int, split: str, b: int) -> str:
    with open(bucket, "rb") as f:
        lines = f.readlines()
    os.unlink(bucket)
    order = np.random.default_rng([seed, PERMUTE_STREAM, SPLITS.index(split), b]).permutation(len(lines))
    with open(out, "wb") as f:
        f.writelines(lines[i] for i in order)
    return out


def _is_in(sorted_rows: np.ndarray, g: int) -> bool:
    i = int(np.searchsorted(sorted_rows, g))
    return i < sorted_rows.size and int(sorted_rows[i]) == g


def _publish_split(paths: list[str], folder: str, storage_options) -> list[str]:
    """The non-empty shards published into ``folder``; shards of an earlier run not written now are removed."""
    urls = [_publish(p, join_url(folder, os.path.basename(p)), storage_options) for p in paths if os.path.getsize(p)]
    fs, root = url_to_fs(folder, storage_options)
    keep = {posixpath.basename(u) for u in urls}
    if fs.exists(root):
        for stale in fs.ls(root, detail=False):
            if posixpath.basename(stale) not in keep and stale.endswith(".jsonl"):
                fs.rm_file(stale)
    return urls


def _publish(local: str, url: str, storage_options) -> str:
    """``local`` moved to ``url`` unless ``url`` already holds the same bytes."""
    fs, path = url_to_fs(url, storage_options)
    if (
        fs.exists(path)
        and fs.size(path) == os.path.getsize(local)
        and file_digest(url, storage_options) == file_digest(local)
    ):
        return url
    if is_local(fs):
        os.makedirs(os.path.dirname(path), exist_ok=True)
    publish(local, fs, path)
    return url


def _size(url: str, storage_options) -> int:
    fs, path = url_to_fs(url, storage_options)
    return fs.size(path)


def _stem(url: str) -> str:
    return posixpath.splitext(posixpath.basename(url.rstrip("/")))[0]
