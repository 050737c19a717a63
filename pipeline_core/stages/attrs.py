"""The attributes of a cache-stage output: what made it (tokenizer, processor, options) and what it holds (counts)."""

from __future__ import annotations

from pipeline_core.formats.keys import KeyLayout
from pipeline_core.formats.positions import STORAGE_ATTR
from pipeline_core.processors.base import Processor
from pipeline_core.stages.options import CacheOptions
from pipeline_core.stages.results import CacheStats
from pipeline_core.version import FORMAT_VERSION


def output_attrs(processor: Processor, options: CacheOptions, stats: CacheStats, pad_value: int | None) -> dict:
    """``pad_value``: the resolved pad of packed output (``cache.resolve_pad_value``)."""
    tok = processor.tokenizer
    desc = processor.describe()
    return {
        "format_version": FORMAT_VERSION,
        "tokenizer_fingerprint": tok.fingerprint,
        "vocab_size": tok.vocab_size,
        **{
            f"{role}_id": (getattr(tok, f"{role}_token_id") if tok.has_role(role) else -1)
            for role in ("bos", "eos", "pad")
        },
        **desc,
        "keys": processor.keys,
        "source_url": stats.input_url,
        "source_sha256": stats.source_sha256,
        "rows_read": stats.rows_read,
        "rows_written": stats.rows_written,
        "samples_written": stats.samples_written,
        "rows_skipped": stats.rows_skipped,
        "skipped_by_reason": dict(sorted(stats.skipped.items())),
        "samples_dropped": stats.samples_dropped,
        "samples_dropped_by_reason": dict(sorted(stats.dropped.items())),
        "rows_truncated": stats.rows_truncated,
        "tokens_written": stats.tokens_written,
        "deferred_keys": stats.deferred_keys,
        "output_format": options.output_format,
        "megatron_keys": stats.megatron_keys,
        "split_sentences": options.split_sentences,
        "sentence_splitter": options.sentence_splitter if options.split_sentences else "",
        "sentences_written": stats.sentences_written,
        "max_row_bytes": options.max_row_bytes,
        **_pack_attrs(options, stats, pad_value),
        # the packed keys holding token ids (pad_value on padding; formats.pack_check)
        **({"packed_id_keys": KeyLayout.of(processor).packed_id_keys()} if options.packed else {}),
    }


def _pack_attrs(options: CacheOptions, stats: CacheStats, pad_value: int | None) -> dict:
    packed = options.packed
    return {
        "pack_size": options.pack_size if packed else 0,
        "pad_value": pad_value if packed else -1,
        "packing": stats.packing,
        "bfd_window": options.bfd_window if packed and options.packing == "bfd" else 0,
        "packs": stats.packs,
        "pack_fill": stats.pack_fill,
        "lower_bound_packs": stats.lower_bound_packs,
        "pack_truncated": stats.pack_truncated,
        "untrained_packs": stats.untrained_packs,
        "position_ids_restart": {"concat": "document_and_pack", "bfd": "document"}.get(stats.packing, ""),
        STORAGE_ATTR: options.position_ids if packed else "",
    }
