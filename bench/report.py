"""Turn measured rows into ratios, a printed table, markdown and a PNG bar chart.

``ratio`` = wall time of the row's reference / wall time of the row, both measured in the same
run on the same input (so it is the speed-up at processing those rows, whatever either side
counts as a token). ``M tok/s`` uses the tokens the row's own tool wrote (h5pipe: tokens in the
HDF5, eos included; datatrove: ids in its .ds files); rows that count no tokens (the exports)
show the reference row's count over their own time, marked ``*``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path

from bench.rows import BY_NAME, FLOW_PT, FLOW_SMALL, GIGA_PT, REF_PT
from bench.runner import Result

MIB = 1 << 20


@dataclass
class Line:
    name: str
    shape: str
    tokens: int | None
    tokens_are_reference: bool
    seconds: float
    peak_rss: int
    ratio: float | None
    of_fast: float | None  # raw gigatoken's wall time / this row's, same input
    reference: str | None
    target: float | None
    runs: list[float]
    error: str | None

    @property
    def tokens_per_second(self) -> float | None:
        if not self.tokens or not self.seconds or math.isnan(self.seconds):
            return None
        return self.tokens / self.seconds

    @property
    def verdict(self) -> str:
        if self.target is None:
            return ""
        if self.ratio is None:
            return "not measured"
        if self.ratio >= self.target:
            return "met"
        return f"missed: {self.ratio / self.target:.0%} of target"


def lines(results: list[Result]) -> list[Line]:
    by_name = {r.name: r for r in results}
    out = []
    for r in results:
        row = BY_NAME[r.name]
        ratio = _speedup(by_name.get(row.reference), r)
        of_fast = _speedup(by_name.get(row.fast), r)
        tokens, borrowed = r.tokens, False
        if tokens is None and REF_PT in by_name:
            tokens, borrowed = by_name[REF_PT].tokens, True
        out.append(
            Line(
                r.name,
                row.shape,
                tokens,
                borrowed,
                r.seconds,
                r.peak_rss,
                ratio,
                of_fast,
                row.reference,
                row.target,
                r.runs,
                r.error,
            )
        )
    return out


def _speedup(reference: Result | None, row: Result) -> float | None:
    if reference is None or reference.error or row.error or not row.seconds:
        return None
    return reference.seconds / row.seconds


def _fmt(value: float | None, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def table_rows(table: list[Line]) -> list[list[str]]:
    rows = []
    for line in table:
        tps = _fmt(line.tokens_per_second and line.tokens_per_second / 1e6, ".2f") + (
            "*" if line.tokens_are_reference else ""
        )
        rows.append(
            [
                line.name,
                line.shape,
                _fmt(line.tokens, ","),
                _fmt(line.seconds, ".2f") if not line.error else "failed",
                tps,
                _fmt(line.ratio, ".2f") + ("x" if line.ratio is not None else ""),
                line.reference or "",
                _fmt(line.target, ".1f") + ("x" if line.target else ""),
                line.verdict,
                _fmt(line.of_fast, ".0%"),
                _fmt(line.peak_rss / MIB if line.peak_rss else None, ",.0f"),
            ]
        )
    return rows


HEADER = [
    "row",
    "input",
    "tokens",
    "seconds",
    "M tok/s",
    "ratio",
    "vs",
    "target",
    "verdict",
    "of gigatoken",
    "peak RSS MiB",
]


def text_table(table: list[Line]) -> str:
    rows = [HEADER, *table_rows(table)]
    widths = [max(len(r[i]) for r in rows) for i in range(len(HEADER))]
    return "\n".join("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip() for r in rows)


def markdown_table(header: list[str], rows: list[list[str]]) -> str:
    out = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(c.replace("|", "\\|") for c in r) + " |" for r in rows]
    return "\n".join(out)


def machine_markdown(machine: dict) -> str:
    libs = ", ".join(f"{k} {v}" for k, v in machine["versions"].items())
    return "\n".join(
        [
            f"- CPU: {machine['cpu']}, {machine['cores']} cores, {machine['ram_gib']} GiB RAM, {machine['os']}",
            f"- Python {machine['python']}; {libs}",
            f"- h5pipe revision {machine['revision']}",
            f"- load average (1, 5, 15 min) at start: {machine['load_start']}; at end: {machine.get('load_end', '?')}",
        ]
    )


def memory_markdown(memory: list[dict]) -> str:
    header = ["chunk", "rows", "tokens", "seconds", "M tok/s", "peak RSS MiB (median)", "each run"]
    rows = [
        [
            f"{m['chunk_mb']:,} MB",
            _fmt(m.get("rows"), ","),
            _fmt(m.get("tokens"), ","),
            _fmt(m.get("seconds"), ".1f"),
            _fmt(m["tokens"] / m["seconds"] / 1e6 if m.get("tokens") and m.get("seconds") else None, ".2f"),
            _fmt(m["peak_rss"] / MIB if m.get("peak_rss") else None, ",.0f"),
            ", ".join(f"{p / MIB:,.0f}" for p in m.get("peaks", [])) or "-",
        ]
        for m in memory
    ]
    return markdown_table(header, rows)


def memory_verdict(memory: list[dict], limit_gib: float = 1.5, spread: float = 0.10) -> list[str]:
    """The limit holds for every run; the spread compares each size's median peak (one run's peak
    varies by several percent between identical runs)."""
    medians = [m["peak_rss"] for m in memory if m.get("peak_rss")]
    if not medians:
        return ["memory: not measured"]
    top = max(p for m in memory for p in m.get("peaks") or [m.get("peak_rss") or 0])
    growth = max(medians) / min(medians) - 1
    runs = max(len(m.get("peaks") or [0]) for m in memory)
    return [
        f"peak RSS <= {limit_gib} GiB: {'met' if top <= limit_gib * (1 << 30) else 'missed'} "
        f"(largest of any run {top / MIB:,.0f} MiB)",
        f"within {spread:.0%} between the chunks: {'met' if growth <= spread else 'missed'} "
        f"({growth:+.1%}, medians of {runs} run(s) per size)",
    ]


def rerun_lines(rerun: dict | None) -> list[str]:
    if not rerun:
        return []
    ratio = rerun["warm"] / rerun["cold"]
    cached = rerun.get("cached_chunks", rerun["chunks"])
    if cached != rerun["chunks"]:
        verdict = f"not measured: only {cached} of {rerun['chunks']} chunks were cached in the second run"
    else:
        verdict = "met (< 10%)" if ratio < 0.10 else f"missed (target < 10%, {ratio / 0.10:.1f}x over)"
    return [
        f"{rerun['chunks']} chunks of ~{rerun['chunk_kb']:,.0f} KB through cache_flow: cold {rerun['cold']:.2f} s, "
        f"warm (fully cached) {rerun['warm']:.2f} s, warm/cold {ratio:.1%}: {verdict}",
        f"the server finished recording the cold run's task runs {rerun.get('settle', 0):.2f} s after it returned; "
        "the warm run started after that (bench/flow_rows.py `cached_rerun`)",
    ]


def flow_lines(rows: list[dict]) -> list[str]:
    """Where a flow row's wall time went: inside the flow function, or in Prefect around it."""
    out = []
    for row in rows:
        body = row.get("detail", {}).get("flow_seconds")
        if body is None or not row.get("seconds") or math.isnan(row["seconds"]):
            continue
        around = row["seconds"] - body
        out.append(
            f"{row['name']}: {row['seconds']:.2f} s wall = {body:.2f} s in the flow function (tokenizer load, "
            f"planning, the chunk tasks, the report) + {around:.2f} s of Prefect around it (creating the flow "
            "run, finishing it)"
        )
    return out


def run_cost_lines(rows: list[dict], text_bytes: int) -> list[str]:
    """The target row split into a per-run cost (the small job) and a rate for the rest, and the
    job size from which that rate clears the target."""
    by_name = {r["name"]: r for r in rows if r.get("tokens") and not r.get("error") and r["seconds"] > 0}
    if not all(name in by_name for name in (FLOW_PT, FLOW_SMALL, REF_PT)):
        return []
    flow, small, ref = by_name[FLOW_PT], by_name[FLOW_SMALL], by_name[REF_PT]
    fixed, rest = small["seconds"], flow["seconds"] - small["seconds"]
    if rest <= 0:
        return [f"per-run cost: {fixed:.2f} s, no less than the whole {FLOW_PT} row ({flow['seconds']:.2f} s)"]
    rate, ref_rate = (flow["tokens"] - small["tokens"]) / rest, ref["tokens"] / ref["seconds"]
    target = BY_NAME[FLOW_PT].target
    out = [
        f"per-run cost: {fixed:.2f} s, the same flow on its first {small['detail'].get('rows', '?')} rows "
        f"({small['tokens']:,} tokens; {small['detail'].get('flow_seconds', float('nan')):.2f} s of it in the "
        "flow function)",
        f"the rest of the {FLOW_PT} row: {flow['tokens'] - small['tokens']:,} tokens in {rest:.2f} s, "
        f"{rate / 1e6:.2f} M tok/s = {rate / ref_rate:.1f}x raw tokenizers" + _of_gigatoken(rate, by_name.get(GIGA_PT)),
    ]
    slack = 1 / (target * ref_rate) - 1 / rate  # seconds per token left over at the target ratio
    if slack <= 0:
        return out + [f"at that rate the row stays under {target:g}x raw tokenizers at any job size"]
    tokens_per_byte = flow["tokens"] / text_bytes
    need_mb = fixed / slack / tokens_per_byte / 1e6
    return out + [
        f"so the row reaches {target:g}x raw tokenizers from about {need_mb:,.0f} MB of text per run "
        f"(this corpus: {text_bytes / 1e6:.0f} MB)"
    ]


def _of_gigatoken(rate: float, giga: dict | None) -> str:
    return "" if giga is None else f", {rate / (giga['tokens'] / giga['seconds']):.0%} of raw gigatoken's rate"


def markdown(report: dict, table: list[Line]) -> str:
    corpus = report["corpus"]
    parts = [
        "# h5pipe throughput benchmark",
        "",
        f"Command: `{report['command']}`",
        "",
        machine_markdown(report["machine"]),
        f"- corpus: {corpus['text_bytes'] / 1e6:.1f} MB of text in {corpus['documents']:,} documents "
        f"(stdlib sources + shared fixtures), {corpus['chunks']} chunk(s) of ~{corpus['chunk_mb']} MB; "
        f"GPT-2 tokenizer; best of {report['repeat']} run(s), each in a fresh process, taken in rounds over the rows",
        "",
        markdown_table(HEADER, table_rows(table)),
        "",
        "ratio = the reference row's wall time / this row's wall time, same input, same run. "
        "of gigatoken = raw gigatoken's wall time on the same rows / this row's: the share of the fast "
        "backend's speed the row keeps. `*`: the row counts no tokens; the reference token count is shown.",
    ]
    if report.get("skipped"):
        parts += ["", "Rows not run here:", ""] + [f"- {name}: {why}" for name, why in report["skipped"].items()]
    flows = flow_lines(report.get("rows", []))
    flows += run_cost_lines(report.get("rows", []), corpus["text_bytes"])
    if flows:
        parts += ["", "## Where the flow row's time goes", ""] + [f"- {v}" for v in flows]
    if report.get("memory"):
        parts += ["", "## Memory: pt cache stage, packed 2048, one chunk", "", memory_markdown(report["memory"]), ""]
        parts += [f"- {v}" for v in memory_verdict(report["memory"])]
    if report.get("reruns"):
        parts += ["", "## Cached rerun", ""] + [f"- {v}" for r in report["reruns"] for v in rerun_lines(r)]
    return "\n".join(parts) + "\n"


COLORS = {"raw": "#7f7f7f", "h5pipe": "#1f77b4", "peer": "#ff7f0e", "export": "#2ca02c"}


def group(name: str) -> str:
    if name.startswith("h5pipe export") or "to_json" in name:
        return "export"
    if name.startswith("h5pipe"):
        return "h5pipe"
    if name.startswith(("datatrove", "datasets map", "Megatron")):
        return "peer"
    return "raw"


def chart(table: list[Line], path: Path, title: str) -> None:
    """Horizontal bars of M tokens/s (log scale); a red tick where a row's target ratio would put it."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    shown = [line for line in table if line.tokens_per_second]
    fig, ax = plt.subplots(figsize=(10, 0.45 * len(shown) + 1.8))
    y = list(range(len(shown)))[::-1]
    values = [line.tokens_per_second / 1e6 for line in shown]
    ax.barh(y, values, color=[COLORS[group(line.name)] for line in shown])
    for yi, v, line in zip(y, values, shown):
        label = f"{v:.2f}" + (f"  ({line.ratio:.2f}x)" if line.ratio is not None else "")
        ax.text(v * 1.05, yi, label, va="center", fontsize=8)
        if line.target and line.ratio:
            goal = v * line.target / line.ratio  # the tokens/s this row would have at its target ratio
            ax.plot([goal, goal], [yi - 0.45, yi + 0.45], color="red", linewidth=2)
            ax.text(goal, yi + 0.5, f"target {line.target:g}x", color="red", fontsize=7, ha="center")
    ax.set_yticks(y)
    ax.set_yticklabels([line.name for line in shown], fontsize=8)
    ax.set_xscale("log")
    ax.set_xlabel("million tokens per second (log scale); ratio to its reference in brackets")
    ax.set_title(title, fontsize=9)
    handles = [plt.Rectangle((0, 0), 1, 1, color=c) for c in COLORS.values()]
    ax.legend(handles, list(COLORS), loc="lower right", fontsize=8)
    ax.set_xlim(min(values) / 2, max(max(values), 1) * 6)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)
