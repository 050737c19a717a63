"""Run reports in the Prefect UI: a per-chunk table, a markdown summary, a progress bar."""

from __future__ import annotations

from prefect.artifacts import (
    create_markdown_artifact,
    create_progress_artifact,
    create_table_artifact,
    update_progress_artifact,
)

from flows.progress import notify
from pipeline_core.packing.tails import TAIL_WARNING, chunk_tails
from tasks.models import ChunkResult


class Progress:
    """A progress artifact advanced as chunks finish."""

    def __init__(self, total: int, key: str, description: str) -> None:
        self.total, self.done, self.key, self.shown = max(total, 1), 0, key, 0.0
        self.id = create_progress_artifact(progress=0.0, key=key, description=description)
        notify(key, 0, self.total)

    def advance(self, chunks: int = 1) -> None:
        """``chunks`` more done; the artifact (an API call) moves in steps of at least 5%."""
        if chunks <= 0:
            return
        self.done += chunks
        percent = 100.0 * self.done / self.total
        if percent - self.shown >= 5 or self.done == self.total:
            update_progress_artifact(self.id, progress=percent)
            self.shown = percent
        notify(self.key, self.done, self.total)


def chunk_rows(results: list[ChunkResult], cached: list[bool]) -> list[dict]:
    """One table row per chunk; the dropped-turn columns only when some chunk dropped turns
    (``rewritten="per_turn"``), so every row has the same columns."""
    dropped = any(r.samples_dropped for r in results)
    return [_chunk_row(r, hit, dropped) for r, hit in zip(results, cached)]


def _chunk_row(r: ChunkResult, hit: bool, dropped: bool) -> dict:
    row = {
        "chunk": r.input_url.rsplit("/", 1)[-1],
        "rows": r.rows_read,
        "samples": r.samples_written,
        "tokens": r.tokens_written,
        "skipped": r.rows_skipped,
        "skipped_by_reason": _listed(r.skipped),
    }
    if dropped:
        row |= {"samples_dropped": r.samples_dropped, "dropped_by_reason": _listed(r.dropped)}
    return row | {
        "truncated": r.rows_truncated,
        "packs": r.packs,
        "pack_fill_%": None if r.pack_fill is None else round(100 * r.pack_fill, 2),
        "seconds": round(r.seconds, 3),
        "cached": hit,
    }


def _listed(counts: dict[str, int]) -> str:
    return ", ".join(f"{k}={v}" for k, v in sorted(counts.items())) or "-"


def totals(results: list[ChunkResult], pack_size: int = 0) -> dict:
    dropped = _by_reason(r.dropped for r in results)
    return {
        "chunks": len(results),
        "rows_read": sum(r.rows_read for r in results),
        # rows that kept a sample (rows_read = rows_written + rows_skipped); results cached before
        # rows and samples were counted apart (rows_written None) kept one sample per row
        "rows_written": sum(r.samples_written if r.rows_written is None else r.rows_written for r in results),
        "samples_written": sum(r.samples_written for r in results),
        "rows_skipped": sum(r.rows_skipped for r in results),
        "skipped_by_reason": _by_reason(r.skipped for r in results),
        # turns dropped from rows that kept others (rewritten="per_turn"); only when there are any
        **({"samples_dropped": sum(dropped.values()), "dropped_by_reason": dropped} if dropped else {}),
        "rows_truncated": sum(r.rows_truncated for r in results),
        "tokens_written": sum(r.tokens_written for r in results),
        "packs": sum(r.packs for r in results),
        **packing_summary(results, pack_size),
    }


def _by_reason(counts) -> dict[str, int]:
    total: dict[str, int] = {}
    for one in counts:
        for reason, n in one.items():
            total[reason] = total.get(reason, 0) + n
    return dict(sorted(total.items()))


def packing_summary(results: list[ChunkResult], pack_size: int = 0) -> dict:
    """Pack utilisation against the lower bound (total tokens / pack size, rounded up, per chunk),
    and with ``pack_size`` what chunk tails cost (``packing.tails``)."""
    packed = [r for r in results if r.packs]
    if not packed:
        return {}
    packs = sum(r.packs for r in packed)
    filled = sum(r.pack_fill * r.packs for r in packed) / packs
    summary = {"pack_utilisation": round(filled, 4), "lower_bound_packs": sum(r.lower_bound_packs for r in packed)}
    untrained = sum(r.untrained_packs or 0 for r in packed)
    if untrained:
        summary["untrained_packs"] = untrained
    if pack_size > 0:
        tails = chunk_tails([round(r.pack_fill * r.packs * pack_size) for r in packed], packs, pack_size)
        summary["chunk_tail_packs"] = tails.tail_packs
        summary["one_stream_pack_utilisation"] = round(tails.one_stream_utilisation, 4)
    return summary


def tail_warning(summary: dict) -> str | None:
    """A warning when chunk tails waste more than ``TAIL_WARNING`` of the packs, saying the cure."""
    tails, packs = summary.get("chunk_tail_packs", 0), summary.get("packs", 0)
    if not packs or tails / packs <= TAIL_WARNING:
        return None
    return (
        f"{tails} of {packs} packs are chunk tails: each of {summary['chunks']} chunks pads its own last pack "
        f"(pack utilisation {summary['pack_utilisation']}, one stream would reach "
        f"{summary['one_stream_pack_utilisation']}); export with larger chunks (chunk_size) or merge small JSONL "
        "files before caching (docs/formats.md, 'Packing and chunk size')"
    )


def untrained_warning(summary: dict) -> str | None:
    """A warning when packing left packs with no trained token, saying what they do and the cure."""
    untrained = summary.get("untrained_packs", 0)
    if not untrained:
        return None
    return (
        f"{untrained} of {summary['packs']} packs hold no trained token (a long prompt cut by packing='concat', "
        "or trained tokens only at document starts; every label -100): a batch made only of such packs has a "
        "NaN mean loss. Use packing='bfd' (whole samples), a larger pack_size, or a trainer that divides the "
        "loss by the batch's trained tokens"
    )


def publish_cache_report(
    results: list[ChunkResult], cached: list[bool], output: str, seconds: float, pack_size: int = 0
) -> dict:
    summary = totals(results, pack_size)
    summary["cached_chunks"] = sum(cached)
    summary["seconds"] = round(seconds, 3)
    computed = sum(r.tokens_written for r, hit in zip(results, cached) if not hit)
    summary["tokens_per_second"] = round(computed / seconds) if seconds > 0 else None
    create_table_artifact(
        table=chunk_rows(results, cached), key="h5pipe-cache-chunks", description=f"per-chunk results, {output}"
    )
    create_markdown_artifact(
        markdown=summary_markdown("cache", summary, output), key="h5pipe-cache-summary", description="h5pipe cache run"
    )
    return summary


def summary_markdown(stage: str, summary: dict, output: str) -> str:
    lines = [f"# h5pipe {stage} run", "", f"Output: `{output}`", "", "| total | value |", "|---|---|"]
    lines += [f"| {k} | {v} |" for k, v in summary.items()]
    return "\n".join(lines)
