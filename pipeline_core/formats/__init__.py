"""File formats: what h5pipe writes and reads, byte for byte.

Owns ragged arrays (``ragged``: one flat array plus offsets, the in-memory shape of every key),
HDF5 (``h5``: the layout, the readers, the completeness mark and attribute encoding;
``h5_writer``: the streaming writer and ``save_h5``), the deferred float keys written only when
they carry information (``deferred``), a file's numbered lines (``lines``) and JSONL batches
made of them with per-line reasons (``jsonl``), which keys are token-aligned (``keys``),
Megatron-LM's ``.bin``/``.idx`` (``megatron``: write, read, merge, and the cache stage's sink)
and ``IOHandler``, the design's facade (``handler``).

May import: ``errors``, ``version``, ``storage``. Nothing here knows about tokenizers, processors
or stages: a format is described by its bytes alone.
"""
