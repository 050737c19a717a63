"""A process the reliability tests start and kill: ``python -m tests.reliability.worker MODE ARGS``.

Modes:
  cache INPUT OUTPUT TOKENIZER [BATCH]  cache_jsonl with the pt processor
  cache-file INPUT OUTPUT TOKENIZER     cache_file of one input (same as cache, one chunk)
  export ROWS OUTPUT CHUNK_SIZE         export_dataset of the rows of a JSONL file (a list source)
  h5 PATH before-close|after-flush      write an h5pipe-shaped HDF5 with H5Writer, print READY, wait
  hold-temp URL                         stage a file with local_staging, print its temp path, wait
  cache-flow PARAMS_JSON                cache_flow(CacheParams) against PREFECT_API_URL

The waiting modes sleep until killed, so the test decides the exact moment of the crash.
"""

from __future__ import annotations

import sys
import time


def ready(message: str = "READY") -> None:
    print(message, flush=True)


def wait_forever() -> None:
    while True:
        time.sleep(60)


def pt_processor(tokenizer_path: str):
    from pipeline_core import AutoTokenizer
    from pipeline_core.processors import ProcessorFactory

    tokenizer = AutoTokenizer.from_file(tokenizer_path, eos_token="<|endoftext|>")
    return ProcessorFactory.create("pt", tokenizer)


def cache(input_url: str, output: str, tokenizer_path: str, batch_size: str = "256") -> None:
    from pipeline_core.stages.cache import cache_jsonl

    ready()
    cache_jsonl(input_url, output, pt_processor(tokenizer_path), batch_size=int(batch_size))


def cache_one(input_url: str, output: str, tokenizer_path: str) -> None:
    from pipeline_core.stages.cache import CacheOptions, cache_file

    ready()
    cache_file(input_url, output, pt_processor(tokenizer_path), CacheOptions(batch_size=64))


def export(rows_path: str, output: str, chunk_size: str) -> None:
    import orjson

    from pipeline_core.stages.export import export_dataset

    with open(rows_path, "rb") as f:
        rows = [orjson.loads(line) for line in f]
    ready()
    export_dataset(rows, output, "train", int(chunk_size))


def h5(path: str, mode: str) -> None:
    """Real partial files: ``before-close`` never flushes; ``after-flush`` flushes data and attributes
    (everything but ``complete``), so the file is a readable HDF5 that only lacks completion."""
    import numpy as np

    from pipeline_core.formats.h5_writer import H5Writer
    from pipeline_core.formats.ragged import Ragged, offsets_from_lengths

    writer = H5Writer(path)
    rng = np.random.default_rng(0)
    for _ in range(20):
        lengths = rng.integers(1, 500, size=64)
        values = rng.integers(0, 50000, size=int(lengths.sum()), dtype=np.int32)
        writer.append_ragged("sequence", Ragged(values, offsets_from_lengths(lengths)))
    if mode == "after-flush":
        writer.set_attrs({"keys": ["sequence"], "rows_read": 1280, "samples_written": 1280, "rows_skipped": 0})
        writer.file.flush()
    ready()
    wait_forever()


def hold_temp(url: str) -> None:
    from pipeline_core.storage.fs import local_staging

    with local_staging(url, suffix=".h5") as tmp:
        with open(tmp, "wb") as f:
            f.write(b"partial")
        ready(tmp)
        wait_forever()


def cache_flow_run(params_json: str) -> None:
    from flows.cache_flow import cache_flow
    from flows.params import CacheParams

    ready()
    cache_flow(CacheParams.model_validate_json(params_json))


MODES = {
    "cache": cache,
    "cache-file": cache_one,
    "export": export,
    "h5": h5,
    "hold-temp": hold_temp,
    "cache-flow": cache_flow_run,
}

if __name__ == "__main__":
    MODES[sys.argv[1]](*sys.argv[2:])
