"""The peers' rows: the tools a user would run instead, on the same corpus and tokenizer."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from bench.corpus import GPT2, GPT2_EOS
from bench.measure import Context, Measured, timed

MEGATRON_ENV = "MEGATRON_LM"  # a Megatron-LM checkout (it is not on PyPI); its row is skipped without one


def datatrove_tokenizer(ctx: Context) -> Measured:
    """datatrove's DocumentTokenizer with its defaults (shuffled output), one task per chunk, 2 workers."""
    from datatrove.executor import LocalPipelineExecutor
    from datatrove.pipeline.readers import JsonlReader
    from datatrove.pipeline.tokens import DocumentTokenizer

    out = ctx.work / "datatrove"
    executor = LocalPipelineExecutor(
        pipeline=[
            JsonlReader(str(ctx.folder("pt")), glob_pattern="*.jsonl"),
            DocumentTokenizer(str(out), tokenizer_name_or_path=str(GPT2), eos_token=GPT2_EOS),
        ],
        tasks=len(ctx.files("pt")),
        workers=2,
        logging_dir=str(ctx.work / "datatrove-logs"),
    )
    seconds, _ = timed(executor.run)
    tokens = sum(p.stat().st_size for p in out.glob("*.ds")) // 2  # uint16 ids: GPT-2's vocab fits
    return Measured(seconds, tokens, {"files": len(list(out.glob("*.ds")))})


def datasets_map(ctx: Context) -> Measured:
    """``load_dataset('json')`` + ``map(tokenize, batched=True, num_proc=2)`` + ``save_to_disk``."""
    import datasets
    import pyarrow.compute as pc
    from tokenizers import Tokenizer

    datasets.disable_progress_bars()
    tok = Tokenizer.from_file(str(GPT2))
    eos = tok.token_to_id(GPT2_EOS)

    def tokenize(batch: dict) -> dict:
        return {"input_ids": [e.ids + [eos] for e in tok.encode_batch(batch["text"])]}

    def work():
        ds = datasets.load_dataset(
            "json", data_files=[str(p) for p in ctx.files("pt")], split="train", cache_dir=str(ctx.work / "hf-cache")
        )
        ds = ds.map(tokenize, batched=True, num_proc=2, remove_columns=["text"])
        ds.save_to_disk(str(ctx.work / "saved"))
        return ds

    seconds, ds = timed(work)
    tokens = int(pc.sum(pc.list_value_length(ds.data.column("input_ids"))).as_py())
    return Measured(seconds, tokens, {"rows": len(ds)})


def megatron_preprocess(ctx: Context) -> Measured:
    """Megatron-LM's ``tools/preprocess_data.py`` (``$MEGATRON_LM``) on each chunk, as its README runs
    it: GPT-2 through ``HuggingFaceTokenizer``, ``--append-eod``, 2 workers; one process per chunk
    (the script takes one input file), each process timed whole."""
    checkout = Path(os.environ[MEGATRON_ENV])
    tokenizer = hf_tokenizer_folder(ctx.work / "hf-gpt2")
    out = ctx.work / "megatron"
    out.mkdir(parents=True, exist_ok=True)
    env = {**os.environ, "PYTHONPATH": f"{checkout}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}

    def work() -> None:
        for chunk in ctx.files("pt"):
            command = [sys.executable, str(checkout / "tools" / "preprocess_data.py"), "--input", str(chunk),
                       "--output-prefix", str(out / chunk.stem), "--json-keys", "text",
                       "--tokenizer-type", "HuggingFaceTokenizer", "--tokenizer-model", str(tokenizer),
                       "--append-eod", "--workers", "2"]  # fmt: skip
            subprocess.run(command, env=env, check=True, capture_output=True)

    seconds, _ = timed(work)
    tokens = sum(p.stat().st_size for p in out.glob("*.bin")) // 2  # uint16: Megatron's pick for a vocab < 65,500
    return Measured(seconds, tokens, {"files": len(list(out.glob("*.bin")))})


def hf_tokenizer_folder(folder: Path) -> Path:
    """GPT-2's tokenizer.json as a folder ``transformers.AutoTokenizer`` loads offline."""
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "tokenizer.json").write_bytes(GPT2.read_bytes())
    config = {"tokenizer_class": "PreTrainedTokenizerFast", "eos_token": GPT2_EOS, "bos_token": GPT2_EOS}
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return folder
