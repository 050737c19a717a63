"""The sample the project ships: a small instruction/response and pretraining corpus it writes itself.

Deterministic (seeded), offline, and large enough to train a small byte-level BPE on, so
``make run`` can show the whole pipeline on a fresh machine with no download.
"""

from __future__ import annotations

import random

TOPICS = {
    "packing": "Packing lays tokenized samples end to end in rows of a fixed length, so a batch wastes no compute on padding.",
    "chunking": "The export stage writes the dataset as numbered JSONL chunks, and every chunk is cached on its own.",
    "caching": "A chunk whose bytes, tokenizer and settings are unchanged is not tokenized again on the next run.",
    "masking": "The loss mask is true on response tokens only, so the model learns to answer and not to ask.",
    "tokenizing": "A byte-level BPE tokenizer never meets an unknown character, because every byte has a token.",
    "hdf5": "HDF5 keeps each key as one flat array plus offsets, so any sample is read with a single slice.",
    "retries": "Transient storage errors are retried with backoff, while a bad configuration fails at once.",
    "manifests": "A manifest written last records every output with its hash, so a partial run never looks complete.",
}
NUMBERS = ["zero", "one", "two", "three", "four", "five", "six", "seven", "eight", "nine", "ten", "eleven", "twelve"]


def _arithmetic(rng: random.Random) -> dict:
    a, b = rng.randint(0, 6), rng.randint(0, 6)
    return {
        "instruction": f"What is {NUMBERS[a]} plus {NUMBERS[b]}?",
        "input": "",
        "output": f"{NUMBERS[a].capitalize()} plus {NUMBERS[b]} is {NUMBERS[a + b]}.",
    }


def _explain(rng: random.Random) -> dict:
    topic, answer = rng.choice(sorted(TOPICS.items()))
    style = rng.choice(
        ["Explain {t} in one sentence.", "What does {t} mean in a data pipeline?", "Why does {t} matter?"]
    )
    return {"instruction": style.format(t=topic), "input": "", "output": answer}


def _rewrite(rng: random.Random) -> dict:
    sentence = rng.choice(list(TOPICS.values()))
    return {"instruction": "Rewrite the sentence in capital letters.", "input": sentence, "output": sentence.upper()}


def sample_rows(n: int = 600, seed: int = 0) -> list[dict]:
    """Alpaca-style rows (instruction, input, output) plus a ``text`` field for pretraining."""
    rng = random.Random(seed)
    makers = [_arithmetic, _explain, _rewrite]
    rows = []
    for _ in range(n):
        row = rng.choice(makers)(rng)
        prompt = row["instruction"] + (" " + row["input"] if row["input"] else "")
        row["text"] = f"{prompt} {row['output']}"
        rows.append(row)
    return rows


def as_sft(row: dict) -> dict:
    """The sample's mapping to the sft processor's fields (used as the export process_func)."""
    query = row["instruction"] + ("\n" + row["input"] if row["input"] else "")
    return {"query": query, "response": row["output"]}
