"""Packing: laying tokenized samples into rows of a fixed length.

Owns the two strategies, ``concat`` (documents end to end, split at row boundaries, as pretraining
does) and best-fit-decreasing (``bfd``: whole samples, never split, as SFT and DPO need), the
``stage`` that feeds a processor's batches to either and keeps the keys aligned, the per-pack
position ids and ``cu_seqlens`` (``packs``: what either packer emits), media carried along with packed samples (``media``) and the
design's simple in-memory ``SequencePacker`` (``sequence``).

May import: ``errors``, ``formats`` (ragged arrays, the key layout), ``processors`` (the batch type
and truncation).
"""
