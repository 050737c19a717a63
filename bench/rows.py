"""The benchmark's rows: what each one runs, on which input, compared with which reference.

Every row is a function ``(Context) -> Measured`` that does its own setup (loading texts, a
tokenizer, a processor) and times only the work the row names. ``run_row`` is the entry point of
the fresh process each repetition runs in (see runner.py), so no row inherits another's warm
caches, thread pools or peak memory:

    python bench/rows.py NAME CORPUS_DIR WORK_DIR RESULT_JSON
"""

from __future__ import annotations

import json
import os
import resource
import sys
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench.corpus import FIXTURES, GPT2, GPT2_EOS, read_column  # noqa: E402
from bench.flow_rows import PACK, SMALL_ROWS, cached_rerun, flow_pt_packed, flow_small_job  # noqa: E402
from bench.measure import Context, Measured, Row, timed  # noqa: E402, F401  (Row: re-exported)
from bench.peers import MEGATRON_ENV, datasets_map, datatrove_tokenizer, megatron_preprocess  # noqa: E402

BATCH = 1000  # texts per raw encode call, as the reference numbers were taken
FLOW_RUNS = 5  # the flow rows' per-run costs vary more than the others' (server calls, threads)
FIELDS = {"pt": ("text",), "sft": ("query", "response"), "dpo": ("query", "chosen", "rejected")}


# ---- raw encoders -------------------------------------------------------------------------------
def raw_tokenizers(method: str, shape: str) -> Callable[[Context], Measured]:
    def run(ctx: Context) -> Measured:
        from tokenizers import Tokenizer

        texts = read_column(ctx.files(shape), FIELDS[shape])
        encode = getattr(Tokenizer.from_file(str(GPT2)), method)

        def work() -> int:
            return sum(sum(len(e.ids) for e in encode(texts[i : i + BATCH])) for i in range(0, len(texts), BATCH))

        seconds, tokens = timed(work)
        return Measured(seconds, tokens, {"texts": len(texts)})

    return run


def raw_gigatoken(shape: str) -> Callable[[Context], Measured]:
    def run(ctx: Context) -> Measured:
        import gigatoken

        texts = read_column(ctx.files(shape), FIELDS[shape])
        tok = gigatoken.Tokenizer.from_json(GPT2.read_text(encoding="utf-8"))
        tok.encode_batch(["warm up"])  # the first call imports awkward (~0.5 s): a library import, before the clock

        def work() -> int:
            return sum(
                int(tok.encode_batch(texts[i : i + BATCH]).layout.offsets.data[-1]) for i in range(0, len(texts), BATCH)
            )

        seconds, tokens = timed(work)
        return Measured(seconds, tokens, {"texts": len(texts)})

    return run


# ---- h5pipe -------------------------------------------------------------------------------------
def h5pipe_tokenizer():
    from pipeline_core import AutoTokenizer

    return AutoTokenizer.from_file(GPT2, eos_token=GPT2_EOS)


def family_tokenizer(work: Path, family: str = "qwen2.5"):
    """GPT-2 plus a model family's control tokens and its chat template (fixtures README)."""
    from tokenizers import AddedToken, Tokenizer

    from pipeline_core import AutoTokenizer

    templates = FIXTURES / "chat_templates"
    spec = json.loads((templates / "families.json").read_text(encoding="utf-8"))[family]
    tok = Tokenizer.from_file(str(GPT2))
    tok.add_special_tokens([AddedToken(t, special=True, normalized=False) for t in spec["special_tokens"]])
    folder = work / f"tokenizer-{family}"
    folder.mkdir(parents=True, exist_ok=True)
    tok.save(str(folder / "tokenizer.json"))
    config = {f"{r}_token": spec[f"{r}_token"] for r in ("bos", "eos", "pad")}
    config["chat_template"] = (templates / spec["template"]).read_text(encoding="utf-8")
    (folder / "tokenizer_config.json").write_text(json.dumps(config), encoding="utf-8")
    return AutoTokenizer.from_file(folder)


def h5pipe_cache(
    kind: str, pack_size: int = 0, strategy: str | None = None, family: str | None = None, shape: str | None = None
) -> Callable[[Context], Measured]:
    """``cache_jsonl`` with the ``kind`` processor over every chunk of the ``shape`` corpus (by
    default ``kind``'s), in this process. The GPT-2 rows write chatml's markers as text (GPT-2 has
    no control tokens for them: ``text_markers``); ``family`` rows use GPT-2 with that family's
    control tokens and template."""
    shape = shape or kind

    def run(ctx: Context) -> Measured:
        from pipeline_core import ProcessorFactory, StrategyFactory, read_attrs
        from pipeline_core.stages.cache import cache_jsonl

        tok = family_tokenizer(ctx.work, family) if family else h5pipe_tokenizer()
        tok.encode("warm up")  # as in raw_gigatoken: the backend's first call imports awkward
        chat = strategy or "chatml"
        options = {"text_markers": True} if chat == "chatml" and not family else {}
        made = None if kind == "pt" else StrategyFactory.create(chat, tok, **options)
        processor = ProcessorFactory.create(kind, tok, strategy=made)
        pad = tok.eos_token_id if pack_size else None
        out = ctx.work / "h5"
        seconds, outputs = timed(lambda: cache_jsonl(str(ctx.folder(shape)), str(out), processor, pack_size, pad))
        attrs = [read_attrs(o) for o in outputs]
        tokens = sum(int(a["tokens_written"]) for a in attrs)
        return Measured(
            seconds, tokens, {"backend": tok.backend_name, "samples": sum(int(a["samples_written"]) for a in attrs)}
        )

    return run


def texts_dataset(ctx: Context):
    from datasets import Dataset

    return Dataset.from_dict({"text": read_column(ctx.files("pt"), FIELDS["pt"])})


def h5pipe_export(ctx: Context) -> Measured:
    from pipeline_core import export_dataset

    ds = texts_dataset(ctx)
    chunk_rows = max(1, -(-len(ds) // max(1, len(ctx.files("pt")))))  # as many chunks as the corpus has
    seconds, urls = timed(lambda: export_dataset(ds, str(ctx.work / "jsonl"), chunk_size=chunk_rows))
    return Measured(seconds, None, {"rows": len(ds), "chunks": len(urls)})


def datasets_to_json(ctx: Context) -> Measured:
    ds = texts_dataset(ctx)
    ctx.work.mkdir(parents=True, exist_ok=True)
    seconds, _ = timed(lambda: ds.to_json(str(ctx.work / "train.jsonl")))
    return Measured(seconds, None, {"rows": len(ds)})


# ---- the table ----------------------------------------------------------------------------------
REF_PT = "tokenizers encode_batch"
REF_SFT = "tokenizers encode_batch, sft rows"
REF_DPO = "tokenizers encode_batch, dpo rows"
GIGA_PT = "gigatoken encode_batch"
GIGA_SFT = "gigatoken encode_batch, sft rows"
GIGA_DPO = "gigatoken encode_batch, dpo rows"
TO_JSON = "datasets Dataset.to_json"
FLOW_PT = "h5pipe cache_flow pt packed 2048"
CHATML_QWEN = "h5pipe cache sft chatml qwen2.5"
FLOW_SMALL = f"h5pipe cache_flow pt packed 2048, first {SMALL_ROWS} rows"

TEMPLATE_NOTES = {
    "qwen2.5": "ratio = chatml time / template time: 0.5 is the issue's 'at most 2x chatml'",
    "llama3.1": "GPT-2 + Llama-3.1 control tokens; ratio as above (Llama-3.1 has no ChatML markers)",
    "qwen3": "GPT-2 + Qwen3 control tokens; its frame is guarded (the template asks contents questions)",
}
TEMPLATE_ROWS = [
    Row(
        f"h5pipe cache sft template {name}",
        "sft",
        h5pipe_cache("sft", strategy="template", family=name),
        CHATML_QWEN,
        0.5,
        note=note,
    )
    for name, note in TEMPLATE_NOTES.items()
]
CHATML_TURNS = f"{CHATML_QWEN}, 2-turn rows"
TURNS_ROWS = [
    Row(
        f"h5pipe cache sft template {name}, 2-turn rows",
        "turns",
        h5pipe_cache("sft", strategy="template", family=name, shape="turns"),
        CHATML_TURNS,
        0.5,
        note="v1 messages rows of two user/assistant turns (the same text as the sft rows)",
    )
    for name in TEMPLATE_NOTES
]
ROWS: list[Row] = [
    Row(REF_PT, "pt", raw_tokenizers("encode_batch", "pt"), note="reference: batches of 1000 texts"),
    Row("tokenizers encode_batch_fast", "pt", raw_tokenizers("encode_batch_fast", "pt"), REF_PT),
    Row(GIGA_PT, "pt", raw_gigatoken("pt"), REF_PT),
    Row("h5pipe cache pt", "pt", h5pipe_cache("pt"), REF_PT, fast=GIGA_PT),
    Row("h5pipe cache pt packed 2048", "pt", h5pipe_cache("pt", PACK), REF_PT, fast=GIGA_PT),
    Row(FLOW_PT, "pt", flow_pt_packed(), REF_PT, 7.0, GIGA_PT, note="the target row", runs=FLOW_RUNS),
    Row(f"{FLOW_PT}, processes", "pt", flow_pt_packed("processes"), FLOW_PT, note="ratio = threads time / this"),
    Row(
        f"{FLOW_PT}, dask",
        "pt",
        flow_pt_packed("dask"),
        FLOW_PT,
        needs="prefect_dask",
        note="ratio = threads time / this; the default local cluster, one in-process worker of 2 threads",
    ),
    Row(
        f"{FLOW_PT}, dask worker processes",
        "pt",
        flow_pt_packed("dask", dask_workers="processes"),
        FLOW_PT,
        needs="prefect_dask",
        note="ratio = threads time / this; a local cluster of 2 worker processes (dask_workers: processes)",
    ),
    Row(FLOW_SMALL, "pt", flow_small_job, note="the target row's per-run cost", runs=FLOW_RUNS),
    Row(REF_SFT, "sft", raw_tokenizers("encode_batch", "sft"), note="reference: query and response encoded"),
    Row(GIGA_SFT, "sft", raw_gigatoken("sft"), REF_SFT),
    Row("h5pipe cache sft", "sft", h5pipe_cache("sft"), REF_SFT, 3.0, GIGA_SFT),
    Row(CHATML_QWEN, "sft", h5pipe_cache("sft", family="qwen2.5"), REF_SFT, note="GPT-2 + Qwen2.5 control tokens"),
    *TEMPLATE_ROWS,
    Row(
        CHATML_TURNS,
        "turns",
        h5pipe_cache("sft", family="qwen2.5", shape="turns"),
        note="the reference of the rows below",
    ),
    *TURNS_ROWS,
    Row(REF_DPO, "dpo", raw_tokenizers("encode_batch", "dpo"), note="reference: query, chosen, rejected encoded"),
    Row(GIGA_DPO, "dpo", raw_gigatoken("dpo"), REF_DPO),
    Row("h5pipe cache dpo", "dpo", h5pipe_cache("dpo"), REF_DPO, 3.0, GIGA_DPO),
    Row(TO_JSON, "pt", datasets_to_json, note="reference for export"),
    Row("h5pipe export_dataset", "pt", h5pipe_export, TO_JSON, 2.5),
    Row("datatrove DocumentTokenizer", "pt", datatrove_tokenizer, REF_PT, fast=GIGA_PT, needs="datatrove"),
    Row("datasets map + save_to_disk", "pt", datasets_map, REF_PT, fast=GIGA_PT),
    Row(
        "Megatron-LM preprocess_data.py",
        "pt",
        megatron_preprocess,
        REF_PT,
        fast=GIGA_PT,
        needs_env=MEGATRON_ENV,
        note="one process per chunk, 2 workers each, timed whole",
    ),
]
RERUN = Row("cache_flow pt packed 2048, cold then cached", "pt", cached_rerun)
MEMORY = "h5pipe cache pt packed 2048"  # the row the memory part runs on one large chunk
BY_NAME = {r.name: r for r in [*ROWS, RERUN]}


def peak_rss_bytes() -> int:
    """Peak RSS of this process and of its largest waited-for child (ru_maxrss is KiB on Linux)."""
    own = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    children = resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss
    scale = 1 if sys.platform == "darwin" else 1024
    return max(own, children) * scale


def run_row(name: str, corpus: Path, work: Path, result: Path) -> None:
    work.mkdir(parents=True, exist_ok=True)
    measured = BY_NAME[name].run(Context(corpus, work))
    result.write_text(json.dumps({**asdict(measured), "peak_rss_self": peak_rss_bytes(), "pid": os.getpid()}))


if __name__ == "__main__":
    run_row(sys.argv[1], Path(sys.argv[2]), Path(sys.argv[3]), Path(sys.argv[4]))
