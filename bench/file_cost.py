"""What one more small chunk costs the cache stage, in instructions counted by valgrind.

Wall and CPU time of a few milliseconds per file vary by +-30% between runs on shared VMs, so a
change of a millisecond cannot be seen in them. Instructions executed can: callgrind counts them
exactly. Two counts, each the difference between a run with ``--files`` more files and one
without, divided by that number:

- ``writer``: an H5Writer file with the attributes every output gets (38 of them) and one small
  ragged key, written and closed;
- ``stage``: ``cache_jsonl`` (pt, packed 2048, GPT-2) over one-row JSONL chunks, per chunk
  (tokenizer load and imports cancel out).

    python -m bench.file_cost              # needs valgrind; ~2 minutes
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

COLLECTED = re.compile(r"Collected : (\d+)")


def writer_files(n: int) -> None:
    import numpy as np

    from pipeline_core.formats.h5_writer import H5Writer
    from pipeline_core.formats.ragged import Ragged

    attrs = {f"a{i}": (i if i % 3 == 0 else ("x" * 20 if i % 3 == 1 else {"k": i})) for i in range(38)}
    ragged = Ragged(np.arange(1000, dtype=np.int32), np.array([0, 500, 1000]))
    with tempfile.TemporaryDirectory() as folder:
        for _ in range(n):
            writer = H5Writer(f"{folder}/one.h5", narrow={"s": np.dtype(np.uint16)})
            writer.append_ragged("s", ragged)
            writer.set_attrs({**attrs, "keys": writer.data_keys()})
            writer.close()


def stage_files(n: int) -> None:
    from bench.rows import h5pipe_tokenizer
    from pipeline_core import ProcessorFactory
    from pipeline_core.stages.cache import cache_jsonl

    tok = h5pipe_tokenizer()
    tok.encode("warm up")
    processor = ProcessorFactory.create("pt", tok)
    with tempfile.TemporaryDirectory() as folder:
        inputs = Path(folder) / "in"
        inputs.mkdir()
        for i in range(n):
            (inputs / f"train_chunk_{i}.jsonl").write_text('{"text": "hello world, a small document"}\n')
        cache_jsonl(str(inputs), f"{folder}/out", processor, 2048, tok.eos_token_id)


PARTS = {"writer": writer_files, "stage": stage_files}


def instructions(part: str, n: int) -> int:
    """Instructions of a whole ``python -m bench.file_cost --run part n`` under callgrind."""
    command = ["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null"]
    command += [sys.executable, "-m", "bench.file_cost", "--run", part, str(n)]
    done = subprocess.run(command, capture_output=True, text=True, check=True)
    return int(COLLECTED.search(done.stderr).group(1))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--files", type=int, default=20, help="files added between the two runs")
    parser.add_argument("--run", nargs=2, metavar=("PART", "N"), help=argparse.SUPPRESS)  # the counted child
    args = parser.parse_args()
    if args.run:
        PARTS[args.run[0]](int(args.run[1]))
        return
    if shutil.which("valgrind") is None:
        raise SystemExit("valgrind is not installed: apt-get install valgrind")
    for part in PARTS:
        base = 1 if part == "stage" else 0  # the stage with no input at all skips its setup
        per_file = (instructions(part, base + args.files) - instructions(part, base)) / args.files
        print(f"{part:7s} {per_file / 1e6:6.2f} M instructions per file", flush=True)


if __name__ == "__main__":
    main()
