"""The sft/dpo baseline script of bench/chat_whole.py does what it says (not timed): chatml prompt
and response encoded apart, the prompt masked; dpo: prompt, chosen, rejected."""

from __future__ import annotations

import subprocess
import sys

import pytest

from bench.chat_whole import BASELINE, markdown
from bench.corpus import GPT2, CorpusSpec, build, read_column


@pytest.fixture(autouse=True)
def _fixtures(fixtures):
    """The corpus and the tokenizer come from ../shared/fixtures."""


def _run_baseline(tmp_path, kind: str, data):
    import datasets

    script = tmp_path / "baseline.py"
    script.write_text(BASELINE, encoding="utf-8")
    out = tmp_path / f"saved-{kind}"
    subprocess.run([sys.executable, str(script), kind, str(data), str(out), str(GPT2)], check=True)
    return datasets.load_from_disk(str(out))


def test_the_sft_baseline_masks_exactly_the_chatml_prompt(tmp_path):
    from tokenizers import Tokenizer

    corpus = build(tmp_path / "corpus", CorpusSpec(0.02, 0.02), shapes=("sft",))
    ds = _run_baseline(tmp_path, "sft", corpus.folder("sft"))
    queries = read_column(corpus.files("sft"), ("query",))
    tok = Tokenizer.from_file(str(GPT2))
    first = tok.encode(f"<|im_start|>user\n{queries[0]}<|im_end|>\n<|im_start|>assistant\n").ids
    assert len(ds) == corpus.documents
    assert ds[0]["input_ids"][: len(first)] == first
    assert ds[0]["labels"][: len(first)] == [-100] * len(first)
    assert ds[0]["labels"][len(first) :] == ds[0]["input_ids"][len(first) :] != []


def test_the_dpo_baseline_encodes_three_parts(tmp_path):
    corpus = build(tmp_path / "corpus", CorpusSpec(0.02, 0.02), shapes=("dpo",))
    ds = _run_baseline(tmp_path, "dpo", corpus.folder("dpo"))
    assert ds.column_names == ["prompt_ids", "chosen_ids", "rejected_ids"] and len(ds) == corpus.documents


def test_the_ratio_is_the_baselines_median_over_h5pipes():
    chat = {"rows": {"sft": {"h5pipe": [2.0, 4.0, 3.0], "datasets": [12.0, 9.0, 30.0], "tokens": 7}}, "repeat": 3}
    assert "| sft | 3.00 | 12.00 | 4.00x | 7 |" in markdown(chat)
