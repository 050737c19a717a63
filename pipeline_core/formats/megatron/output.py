"""Megatron-LM output of the cache stage: ``{stem}_{key}_{level}.bin/.idx`` per key.

Written for ``output_format='megatron'`` or ``'both'``, one indexed dataset per key that
megatron-core's ``IndexedDataset(prefix)`` opens. Names follow Megatron's ``preprocess_data.py``:
``key`` is the JSON key the text came from (``text`` by default: ``{stem}_text_document``; a
processor says so in ``megatron_names``, other keys keep their own name) and ``level`` is
``sentence`` with ``split_sentences``, else ``document``. ``megatron_prefixes`` and the merged
outputs are keyed by that file key.

- the token keys (``sequence``; ``chosen`` and ``rejected`` for dpo) in the dtype Megatron picks
  for the vocabulary (``choose_dtype``: uint16 below 65500 ids, else int32);
- masks as uint8, float keys (``loss_weight``) as float32 and only when fractional, like the HDF5;
  per-sample keys (``media``) as uint8 bytes, one sequence per sample;
- one document per sample, or per text with ``split_sentences`` (its sentences are the sequences).

The files always hold unpacked samples: Megatron and MindSpeed build their training samples at
load time. They are written in a local staging folder and published pair by pair, the ``.bin``
before the ``.idx`` (uploaded in that order to remote storage), so a reader never finds an index
without its data. ``merge_megatron`` joins the per-chunk outputs into one dataset per key.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import tempfile
from collections.abc import Mapping, Sequence

import numpy as np

from pipeline_core.formats.deferred import is_fractional
from pipeline_core.formats.keys import SENTENCE_LENGTHS, KeyLayout, sentence_items
from pipeline_core.formats.megatron import IndexedReader, IndexedWriter, choose_dtype, merge_indexed
from pipeline_core.formats.megatron.merge import retyped_copy
from pipeline_core.formats.ragged import Ragged, offsets_from_lengths
from pipeline_core.storage.fs import is_local, join_url, remove_quietly, staging_tag, url_to_fs

LEVELS = ("document", "sentence")


def megatron_name(stem: str, key: str, level: str = "document") -> str:
    """The file prefix Megatron gives key ``key`` of ``stem`` at ``level`` (document or sentence)."""
    return f"{stem}_{key}_{level}"


class MegatronSink:
    """One indexed dataset per key of a chunk, staged then published (see the module doc)."""

    def __init__(
        self,
        output_dir: str,
        stem: str,
        layout: KeyLayout,
        vocab_size: int,
        storage_options: dict | None = None,
        *,
        names: Mapping[str, str] | None = None,
        level: str = "document",
    ) -> None:
        self.output_dir, self.stem, self.layout = str(output_dir), stem, layout
        self.vocab_size, self.storage_options = vocab_size, storage_options
        self.names, self.level = dict(names or {}), level
        self.staging = _staging_dir(self.output_dir, stem, storage_options)
        self._writers: dict[str, IndexedWriter] = {}
        self._fractional: set[str] = set()

    def write(self, samples: dict[str, Ragged]) -> None:
        if SENTENCE_LENGTHS in samples:
            self._write_documents(*sentence_items(samples))
            return
        for key, ragged in samples.items():
            if key in self.layout.deferred and is_fractional(ragged.values):
                self._fractional.add(key)
            values = ragged.values.view(np.uint8) if ragged.values.dtype == np.bool_ else ragged.values
            self._writer(key, values).add_sequences(values, ragged.lengths)

    def finish(self) -> None:
        for writer in self._writers.values():
            writer.finalize()

    def kept_keys(self) -> list[str]:
        """The file keys to publish: all but the deferred keys without a fractional value."""
        kept = [k for k in self._writers if k not in self.layout.deferred or k in self._fractional]
        return [self.file_key(k) for k in kept]

    def file_key(self, key: str) -> str:
        """The name key ``key`` has in file names (Megatron's JSON key for the text)."""
        return self.names.get(key, key)

    def publish(self) -> dict[str, str]:
        """Move the kept pairs to the output folder; {file key: prefix URL}. Removes the staging folder
        and the pairs an earlier run left for deferred keys this run does not keep."""
        published = {}
        for key in self.kept_keys():
            name = megatron_name(self.stem, key, self.level)
            published[key] = join_url(self.output_dir, name)
            publish_pair(os.path.join(self.staging, name), published[key], self.storage_options)
        for key in {self.file_key(k) for k in self.layout.deferred} - set(published):
            prefix = join_url(self.output_dir, megatron_name(self.stem, key, self.level))
            for ext in (".idx", ".bin"):
                remove_quietly(prefix + ext, self.storage_options)
        self.discard()
        return published

    def discard(self) -> None:
        for writer in self._writers.values():
            writer.abort()  # after finalize() only removes leftover temporary files
        shutil.rmtree(self.staging, ignore_errors=True)

    def _write_documents(self, sentences: Ragged, per_document: np.ndarray) -> None:
        writer = self._writer("sequence", sentences.values)
        bounds = offsets_from_lengths(per_document)
        for d in range(per_document.size):
            document = sentences.slice_rows(int(bounds[d]), int(bounds[d + 1]))
            writer.add_document(document.values, document.lengths)

    def _writer(self, key: str, values: np.ndarray) -> IndexedWriter:
        if key not in self._writers:
            dtype = choose_dtype(self.vocab_size) if key in self.layout.groups else values.dtype
            name = megatron_name(self.stem, self.file_key(key), self.level)
            self._writers[key] = IndexedWriter(os.path.join(self.staging, name), dtype)
        return self._writers[key]


def publish_pair(local_prefix: str, url_prefix: str, storage_options: dict | None = None) -> None:
    """Publish ``local_prefix.bin/.idx`` at ``url_prefix``: an old .idx goes first, the new one last."""
    fs, path = url_to_fs(url_prefix, storage_options)
    with contextlib.suppress(FileNotFoundError):
        fs.rm(path + ".idx")
    for ext in (".bin", ".idx"):
        if is_local(fs):
            os.replace(local_prefix + ext, path + ext)
        else:
            fs.put_file(local_prefix + ext, path + ext)
    if not is_local(fs):
        fs.invalidate_cache(path.rsplit("/", 1)[0])


def merge_megatron(
    prefix_maps: Sequence[Mapping[str, str]],
    out_prefix: str,
    storage_options: dict | None = None,
    stand_ins: Mapping[str, str] | None = None,
) -> dict[str, str]:
    """Join per-chunk outputs (``CacheStats.megatron_prefixes``, in order) key by key into
    ``{out_prefix}_{key}_{level}`` (the chunks' level: ``document`` or ``sentence``); streaming (see
    ``merge_indexed``). Chunks that wrote nothing (no sample survived) are skipped. The output's
    folder is created. Returns {key: merged prefix URL}.

    A deferred key (``loss_weight``) is written only by the chunks where it is fractional; elsewhere
    it equals the key ``stand_ins`` names (``loss_mask``: weights all 0 or 1), so a chunk without it
    gives that key's values cast to the deferred key's dtype. Any other difference in keys is refused."""
    maps = [m for m in prefix_maps if m]
    keys = sorted({k for m in maps for k in m})
    _check_one_level(maps)
    stand_ins = _stand_ins_needed(maps, keys, stand_ins or {})
    with tempfile.TemporaryDirectory(prefix="h5pipe-merge-") as tmp:
        merged = {}
        for key in keys:
            local = [
                _local_prefix(m[key], tmp, f"{i}_{key}", storage_options) if key in m else None
                for i, m in enumerate(maps)
            ]
            if None in local:  # a deferred key some chunks left out: made from its stand-in there
                dtype = IndexedReader(next(p for p in local if p is not None)).dtype
                local = [
                    p or _made_up(maps[i], key, stand_ins[key], dtype, tmp, i, storage_options)
                    for i, p in enumerate(local)
                ]
            merged[key] = f"{out_prefix}_{key}_{level_of(next(m[key] for m in maps if key in m))}"
            fs, path = url_to_fs(merged[key], storage_options)
            if is_local(fs):
                os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
                merge_indexed(local, path)  # publishes atomically itself
            else:
                merge_indexed(local, os.path.join(tmp, f"merged_{key}"))
                publish_pair(os.path.join(tmp, f"merged_{key}"), merged[key], storage_options)
        return merged


def level_of(prefix: str) -> str:
    """``sentence`` for a ``..._sentence`` prefix, else ``document``."""
    return "sentence" if str(prefix).endswith("_sentence") else "document"


def _check_one_level(maps: list[Mapping[str, str]]) -> None:
    """Refuse chunks of sentences beside chunks of documents: one merged file holds one level."""
    levels = {level_of(p) for m in maps for p in m.values()}
    if len(levels) > 1:
        raise ValueError(
            f"the chunks mix levels {sorted(levels)} (split_sentences on in some, off in others); merge only "
            "folders written by one cache run"
        )


def _stand_ins_needed(maps: list[Mapping[str, str]], keys: list[str], stand_ins: Mapping[str, str]) -> dict:
    """The stand-in of each key some chunks lack; refuses a key no stand-in can make up."""
    needed = {}
    for i, m in enumerate(maps):
        for key in set(keys) - set(m):
            if stand_ins.get(key) not in m:
                raise ValueError(
                    f"chunk {i} has megatron keys {sorted(m)} but others have {keys}, and {key!r} has no key it "
                    "stands for in that chunk; merge only folders written by one cache run (one processor, one "
                    "output_format)"
                )
            needed[key] = stand_ins[key]
    return needed


def _made_up(m: Mapping[str, str], key: str, stand_in: str, dtype, tmp: str, i: int, storage_options) -> str:
    """Chunk ``i``'s ``key`` as a local pair: its ``stand_in`` key's values cast to ``dtype``."""
    source = _local_prefix(m[stand_in], tmp, f"{i}_{stand_in}", storage_options)
    made = os.path.join(tmp, f"{i}_{key}_from_{stand_in}")
    retyped_copy(source, made, dtype)
    return made


def _local_prefix(url_prefix: str, tmp: str, name: str, storage_options: dict | None) -> str:
    fs, path = url_to_fs(url_prefix, storage_options)
    if is_local(fs):
        return path
    local = os.path.join(tmp, name)
    for ext in (".bin", ".idx"):
        fs.get_file(path + ext, local + ext)
    return local


def _staging_dir(output_dir: str, stem: str, storage_options: dict | None) -> str:
    fs, root = url_to_fs(output_dir, storage_options)
    # both names carry the writer (host, pid): a rerun sweeps a killed writer's folder at once
    if not is_local(fs):
        return tempfile.mkdtemp(prefix=f"h5pipe-tmp-{staging_tag()}-megatron-")
    path = os.path.join(root, f".{stem}.megatron-tmp-{staging_tag()}")
    os.makedirs(path)
    return path
