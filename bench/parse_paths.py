"""Would parsing JSONL with pyarrow instead of orjson bring the pt stage closer to raw gigatoken?

Three ways to the same token ids, in one process, alternated in rounds, each with a new tokenizer
(its word cache starts empty, as in bench/rows.py's raw row):

- ``raw``: gigatoken ``encode_batch`` of the texts already in memory, 1,000 per call;
- ``orjson lines``: a thread reads each file, splits it into lines and takes ``orjson.loads(line)
  ["text"]`` of each (the GIL held throughout), while the main thread encodes the file before;
- ``pyarrow``: a thread reads each file and parses it with ``pyarrow.json`` (C++, the GIL
  released), the ``text`` column handed to gigatoken as an awkward array over Arrow's buffers (no
  Python string per row), while the main thread encodes the file before.

Neither pipeline writes anything or checks a row; the stage does both (docs/performance.md,
"Measured and left as they are", says what pyarrow accepts that h5pipe must refuse)::

    python -m bench.parse_paths --size-mb 400 --chunk-mb 10 --repeat 3   # from the project root
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Iterator
from functools import partial
from pathlib import Path

import numpy as np
import orjson

from bench.ceiling import BATCH, clocked, pt_corpus
from bench.corpus import GPT2
from pipeline_core.stages.read_ahead import ReadAhead


def read_ahead(items: Iterable) -> Iterator:
    """``items`` produced by a thread of its own, one item ahead of the consumer (the stage's own
    ``ReadAhead``)."""
    with ReadAhead(items, depth=1) as ahead:
        yield from ahead


def orjson_texts(files: list[Path]) -> Iterator[list[str]]:
    for path in files:
        yield [orjson.loads(line)["text"] for line in path.read_bytes().splitlines()]


def arrow_texts(files: list[Path]) -> Iterator:
    import awkward as ak
    import pyarrow as pa
    import pyarrow.json as pj

    options = pj.ParseOptions(
        explicit_schema=pa.schema([("text", pa.large_string())]), unexpected_field_behavior="ignore"
    )
    for path in files:
        table = pj.read_json(path, read_options=pj.ReadOptions(block_size=32 << 20), parse_options=options)
        for column in table.column("text").chunks:
            yield _strings(ak, column)


def _strings(ak, column):
    """An Arrow large_string array as awkward strings over the same buffers (int64 offsets, as
    gigatoken wants them)."""
    if column.null_count:
        raise ValueError("a row without a string text: this benchmark's corpus has none")
    _, offsets, data = column.buffers()
    offsets = np.frombuffer(offsets, dtype=np.int64)[column.offset : column.offset + len(column) + 1]
    chars = ak.contents.NumpyArray(np.frombuffer(data, dtype=np.uint8), parameters={"__array__": "char"})
    layout = ak.contents.ListOffsetArray(ak.index.Index64(offsets), chars, parameters={"__array__": "string"})
    return ak.Array(layout)


def tokens(rows) -> int:
    return int(rows.layout.offsets.data[-1])


def pipelines(files: list[Path]) -> dict[str, Callable[[object], int]]:
    texts = [t for batch in orjson_texts(files) for t in batch]
    return {
        "raw": lambda tok: sum(tokens(tok.encode_batch(texts[i : i + BATCH])) for i in range(0, len(texts), BATCH)),
        "orjson lines": lambda tok: sum(tokens(tok.encode_batch(b)) for b in read_ahead(orjson_texts(files))),
        "pyarrow": lambda tok: sum(tokens(tok.encode_batch(b)) for b in read_ahead(arrow_texts(files))),
    }


def main() -> None:
    import gigatoken

    files, repeat = pt_corpus(__doc__)
    source = GPT2.read_text(encoding="utf-8")
    runs = pipelines(files)
    best: dict[str, tuple[float, float]] = {}
    counts: dict[str, int] = {}
    for round_ in range(repeat):
        for name, run in runs.items():
            tok = gigatoken.Tokenizer.from_json(source)
            tok.encode_batch(["warm up"])  # the first call imports awkward
            wall, cpu, counts[name] = clocked(partial(run, tok))
            print(f"round {round_ + 1} {name:13s} {wall:5.2f} s wall {cpu:5.2f} s CPU", flush=True)
            best[name] = min(best.get(name, (wall, cpu)), (wall, cpu))
    if len(set(counts.values())) != 1:
        raise SystemExit(f"the pipelines disagree on the number of tokens: {counts}")
    raw = best["raw"][0]
    for name, (wall, cpu) in best.items():
        print(f"{name:13s} best {wall:5.2f} s wall {cpu:5.2f} s CPU  {raw / wall:4.0%} of raw gigatoken's speed")


if __name__ == "__main__":
    main()
