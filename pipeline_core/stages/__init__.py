"""The two stages of the design, as plain functions.

``export``: a source (a HuggingFace dataset, a file, a dataset_info mixture) becomes numbered JSONL
chunks, each row passed through an optional ``process_func`` (``process_func`` loads it by name
and hashes its code). ``cache``: a JSONL chunk is read in batches, tokenized by a processor,
optionally packed (``options``: how), and written as HDF5 and/or Megatron files by a ``chunk_writer`` (the HDF5 side
is ``h5_sink``); what each wrote is counted in ``results``. ``splits`` makes train/validation
splits and a global shuffle of the rows before the cache stage; ``merge`` joins a cache output's
per-chunk Megatron/MindSpeed files into one dataset per key.

The stages are the only place that composes the other packages; the Prefect tasks and flows call
these functions and nothing below them.

May import: every other package of the core but ``loader``.
"""
