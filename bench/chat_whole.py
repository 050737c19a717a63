"""Whole-process sft/dpo rows: ``h5pipe cache sft|dpo`` against the ``datasets.map`` script a user
would write, both as fresh processes timed from outside, on the same chunks and tokenizer.

    python bench/chat_whole.py --corpus DIR [--repeat 3] [--out bench/results]

``DIR`` holds ``sft/`` and ``dpo/`` folders of JSONL chunks (bench/corpus.py). The h5pipe rows run
the CLI with the kept server already running (bench/whole.py's environment: its own PREFECT_HOME
and a free port), chatml with its markers written as text (GPT-2 has no control tokens for them),
unpacked. The baseline (BASELINE below, written to a file and run by this Python) is what the
issue names: ``load_dataset("json")``, ``map`` a tokenize function (chatml prompt and response
encoded apart, the prompt's labels masked with -100; dpo: the prompt, chosen and rejected),
``num_proc=2``, ``save_to_disk``. Medians of ``--repeat`` interleaved runs.
"""

from __future__ import annotations

import argparse
import json
import shutil
import statistics
import subprocess
import sys
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import GPT2, GPT2_EOS  # noqa: E402
from bench.whole import env_for, free_port, server  # noqa: E402
from bench.whole import timed as timed_cli  # noqa: E402

BENCH = Path(__file__).resolve().parent

BASELINE = """\
import sys
import datasets
from tokenizers import Tokenizer

kind, data, out, tokenizer = sys.argv[1:5]
tok = Tokenizer.from_file(tokenizer)
eos = tok.token_to_id("<|endoftext|>")


def prompt(q):
    return f"<|im_start|>user\\n{q}<|im_end|>\\n<|im_start|>assistant\\n"


def ids(texts):
    return [e.ids for e in tok.encode_batch(texts)]


def sft(batch):
    p, r = ids([prompt(q) for q in batch["query"]]), ids([t + "<|im_end|>\\n" for t in batch["response"]])
    return {"input_ids": [a + b for a, b in zip(p, r)], "labels": [[-100] * len(a) + b for a, b in zip(p, r)]}


def dpo(batch):
    p = ids([prompt(q) for q in batch["query"]])
    c, r = ids([t + "<|im_end|>\\n" for t in batch["chosen"]]), ids([t + "<|im_end|>\\n" for t in batch["rejected"]])
    return {"prompt_ids": p, "chosen_ids": c, "rejected_ids": r}


ds = datasets.load_dataset("json", data_dir=data, split="train")
ds = ds.map(sft if kind == "sft" else dpo, batched=True, num_proc=2, remove_columns=ds.column_names)
ds.save_to_disk(out)
"""


def h5pipe_args(kind: str, inputs: Path, output: Path) -> list[str]:
    tokenizer = ["--tokenizer", str(GPT2), "--eos-token", GPT2_EOS, "--pad-token", GPT2_EOS]
    chat = ["--processor", kind, "--strategy", "chatml", "--strategy-kwargs", json.dumps({"text_markers": True})]
    return ["cache", "--input", str(inputs), "--output", str(output), *tokenizer, *chat]


def baseline_wall(script: Path, kind: str, inputs: Path, output: Path, env: dict) -> float:
    started = time.perf_counter()
    command = [sys.executable, str(script), kind, str(inputs), str(output), str(GPT2)]
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    wall = time.perf_counter() - started
    if done.returncode != 0:
        raise RuntimeError(f"the datasets.map {kind} script failed ({done.returncode}): {done.stderr[-2000:]}")
    return wall


def run(corpus: Path, out: Path, repeat: int) -> dict:
    """{kind: {"h5pipe": [walls], "datasets": [walls], "tokens": h5pipe's tokens_written}}."""
    work = out / "chat-whole-work"
    shutil.rmtree(work, ignore_errors=True)
    work.mkdir(parents=True)
    env = env_for(work, free_port())
    env["HF_DATASETS_CACHE"], env["HF_DATASETS_OFFLINE"] = str(work / "hf-cache"), "1"
    script = work / "datasets_map_baseline.py"
    script.write_text(BASELINE, encoding="utf-8")
    found = {k: {"h5pipe": [], "datasets": [], "tokens": None} for k in ("sft", "dpo")}
    try:
        server(env, "start")
        for i in range(repeat):
            for kind, row in found.items():
                wall, summary = timed_cli(env, h5pipe_args(kind, corpus / kind, work / f"h5-{kind}-{i}"))
                row["h5pipe"].append(wall)
                row["tokens"] = summary.get("tokens_written")
                row["datasets"].append(baseline_wall(script, kind, corpus / kind, work / f"hf-{kind}-{i}", env))
                shutil.rmtree(work / "hf-cache", ignore_errors=True)  # each baseline run parses afresh
                print(f"  {kind}: h5pipe {wall:.2f} s, datasets.map {row['datasets'][-1]:.2f} s", flush=True)
    finally:
        server(env, "stop")
        shutil.rmtree(work, ignore_errors=True)
    return {"rows": found, "repeat": repeat}


def markdown(chat: dict) -> str:
    lines = [
        "## sft/dpo as a user runs them: h5pipe CLI against a `datasets.map` script",
        "",
        f"Wall time of fresh processes (median of {chat['repeat']}); h5pipe with its kept server running, "
        "chatml, unpacked; the script: `load_dataset('json')` + `map(tokenize, batched=True, num_proc=2)` + "
        "`save_to_disk` (bench/chat_whole.py). Target: h5pipe >= 3x.",
        "",
        "| shape | h5pipe cache s | datasets.map script s | ratio | tokens (h5pipe) |",
        "|---|---|---|---|---|",
    ]
    for kind, row in chat["rows"].items():
        ours, theirs = statistics.median(row["h5pipe"]), statistics.median(row["datasets"])
        tokens = f"{row['tokens']:,}" if row.get("tokens") else "-"
        lines.append(f"| {kind} | {ours:.2f} | {theirs:.2f} | {theirs / ours:.2f}x | {tokens} |")
    return "\n".join(lines) + "\n"


def main(argv: list[str] | None = None) -> dict:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--corpus", type=Path, required=True, help="a corpus folder with sft/ and dpo/ chunks")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--out", type=Path, default=BENCH / "results")
    args = parser.parse_args(argv)
    chat = run(args.corpus, args.out, args.repeat)
    print(markdown(chat))
    return chat


if __name__ == "__main__":
    main()
