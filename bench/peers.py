"""The peers' rows: the tools a user would run instead, on the same corpus and tokenizer."""

from __future__ import annotations

from bench.corpus import GPT2, GPT2_EOS
from bench.measure import Context, Measured, timed


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
