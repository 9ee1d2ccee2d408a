"""The report's figures, drawn by matplotlib from result files: only the numbers the files hold.

Each figure plots one or more results side by side (e.g. before and after a reload). Nothing is
recomputed: bars are the cells' `output_throughput`, lines the context points' acceptance, dots
each request's raw record, and the mixed-traffic timeline the times its result recorded.
Figures are built with matplotlib's object API (no pyplot, no GUI backend, no global state).
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING, Optional

from sparkctl.bench.result import BenchResult

if TYPE_CHECKING:  # matplotlib is imported when a plot is drawn (the report extra)
    from matplotlib.figure import Figure

# Colour per result, so one run has the same colour in every figure.
COLOURS = ("#1f77b4", "#ff7f0e", "#2ca02c", "#d62728", "#9467bd", "#8c564b")


@dataclass(frozen=True)
class Labeled:
    label: str  # how the figures name this result (its file name, unless two share one)
    result: BenchResult


@dataclass
class Plot:
    name: str  # file stem of its PNG
    title: str
    caption: str
    figure: Figure

    @cached_property
    def png(self) -> bytes:
        """The figure as PNG (drawn once; the page and the file share it)."""
        buf = io.BytesIO()
        # No Software/date metadata: the same result gives the same file.
        self.figure.savefig(buf, format="png", dpi=110, metadata={"Software": None})
        return buf.getvalue()


def require(option: str) -> None:
    """Refuse (exit 2) when the plotting stack is not installed: it is the `report` extra, so a control
    machine that never draws does not carry it. Checked before a bench run, not after it."""
    from importlib.util import find_spec

    from sparkctl.errors import InputError

    missing = [
        dist
        for module, dist in (("matplotlib", "matplotlib"), ("numpy", "numpy"), ("PIL", "pillow"))
        if find_spec(module) is None
    ]
    if missing:
        raise InputError(
            f"{option} draws plots with matplotlib, numpy and pillow: {', '.join(missing)} "
            f"{'is' if len(missing) == 1 else 'are'} not installed (the optional `report` extra)",
            fix="pip install 'sparkctl[report]' (installed with pipx: pipx inject sparkctl matplotlib)",
        )


def _figure(rows: int = 1, cols: int = 1, width: float = 10.0, height: float = 4.2):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height * rows), layout="constrained")
    axes = fig.subplots(rows, cols, squeeze=False)
    return fig, axes


def _colour(i: int) -> str:
    return COLOURS[i % len(COLOURS)]


def cells_of(results: list[Labeled]) -> list[tuple[str, int]]:
    """Every (workload, streams) cell any result has, in first-seen order."""
    return list(dict.fromkeys((c.workload, c.streams) for r in results for c in r.result.throughput))


def _cell_name(workload: str, streams: int) -> str:
    return f"{workload}\n{streams} stream{'s' if streams > 1 else ''}"


# ---- throughput per workload x streams ---------------------------------------------------------


def throughput(results: list[Labeled]) -> Optional[Plot]:
    cells = cells_of(results)
    if not cells:
        return None
    fig, axes = _figure()
    ax = axes[0][0]
    width = 0.8 / len(results)
    for i, r in enumerate(results):
        xs, heights = [], []
        for j, (w, s) in enumerate(cells):
            c = r.result.cell(w, s)
            if c is not None and c.output_throughput is not None:
                xs.append(j - 0.4 + width * (i + 0.5))
                heights.append(c.output_throughput)
        bars = ax.bar(xs, heights, width=width * 0.95, label=r.label, color=_colour(i))
        ax.bar_label(bars, fmt="{:,.0f}", fontsize=8, padding=2)
    ax.set_xticks(range(len(cells)), [_cell_name(w, s) for w, s in cells])
    ax.set_ylabel("output throughput (tokens/s, all streams)")
    ax.set_xlabel("workload and concurrent streams")
    ax.set_title("Median aggregate output throughput per cell")
    ax.grid(axis="y", alpha=0.3)
    ax.legend(loc="upper right")
    return Plot(
        "throughput",
        "Throughput per workload and stream count",
        "Median over repeats of the aggregate output tok/s of each cell (the seed's table).",
        fig,
    )


# ---- acceptance against context ------------------------------------------------------------------


def context_x(point) -> int:
    """Where a context point sits: the prompt tokens the server counted, else the size asked for."""
    return point.prompt_tokens if point.prompt_tokens is not None else point.target_prompt_tokens


CONTEXT_PANELS = (
    ("spec_decode_acceptance_length", "acceptance length (tokens per step)"),
    ("spec_decode_acceptance_rate", "acceptance rate (% of draft tokens)"),
    ("decode_throughput", "decode throughput (tokens/s, one stream)"),
)


def _kilo(tokens: int) -> str:
    """A prompt size as people write it: 1K, 8K, 80K (tokens / 1024, rounded)."""
    return f"{tokens / 1024:.0f}K" if tokens >= 1024 else str(tokens)


def acceptance_context(results: list[Labeled]) -> Optional[Plot]:
    if not any(r.result.context for r in results):
        return None
    from matplotlib.ticker import NullLocator

    fig, axes = _figure(1, len(CONTEXT_PANELS), width=13.0)
    sizes = sorted({context_x(p) for r in results for p in r.result.context})
    for k, (field, ylabel) in enumerate(CONTEXT_PANELS):
        ax = axes[0][k]
        for i, r in enumerate(results):
            pts = [(context_x(p), getattr(p, field)) for p in r.result.context if getattr(p, field) is not None]
            if pts:
                ax.plot([x for x, _ in pts], [y for _, y in pts], marker="o", label=r.label, color=_colour(i))
        ax.set_xscale("log", base=2)
        ax.set_xticks(sizes, [_kilo(x) for x in sizes])
        ax.xaxis.set_minor_locator(NullLocator())
        ax.set_xlabel("prompt length (tokens, log scale)")
        ax.set_ylabel(ylabel)
        ax.grid(alpha=0.3)
        if field == "spec_decode_acceptance_rate":
            ax.set_ylim(0, 100)
        else:
            ax.set_ylim(bottom=0)
    axes[0][0].legend()
    workloads = sorted({p.workload for r in results for p in r.result.context})
    fig.suptitle(f"Speculative acceptance against context ({', '.join(workloads)} workload)")
    return Plot(
        "acceptance-context",
        "Acceptance against context length",
        "Acceptance length and rate from /metrics deltas around each prompt size, and its decode tok/s.",
        fig,
    )


# ---- TTFT / ITL distributions per cell --------------------------------------------------------------

LATENCY_PANELS = (
    # (record field, the cell's summary field drawn as a tick, y label)
    ("ttft_ms", "median_ttft_ms", "time to first token (ms)"),
    ("mean_itl_ms", "median_itl_ms", "inter-token latency, mean per request (ms)"),
)


def latency_points(r: BenchResult, cells: list[tuple[str, int]], field: str) -> list[tuple[int, float]]:
    """(cell index, value) for every request of every repeat of every cell that recorded the value."""
    out = []
    for j, (w, s) in enumerate(cells):
        c = r.cell(w, s)
        for rep in c.repeats if c else []:
            out += [(j, getattr(q, field)) for q in rep.requests if getattr(q, field) is not None]
    return out


def latency(results: list[Labeled]) -> Optional[Plot]:
    cells = cells_of(results)
    if not cells:
        return None
    fig, axes = _figure(len(LATENCY_PANELS), 1)
    width = 0.8 / len(results)
    for k, (field, summary, ylabel) in enumerate(LATENCY_PANELS):
        ax = axes[k][0]
        for i, r in enumerate(results):
            shift = -0.4 + width * (i + 0.5)
            pts = latency_points(r.result, cells, field)
            ax.scatter(
                [j + shift for j, _ in pts],
                [v for _, v in pts],
                s=14,
                alpha=0.6,
                color=_colour(i),
                label=f"{r.label}: each request",
            )
            med = [
                (j + shift, getattr(c, summary))
                for j, c in enumerate(r.result.cell(w, s) for w, s in cells)
                if c is not None and getattr(c, summary) is not None
            ]
            ax.scatter(
                [x for x, _ in med],
                [y for _, y in med],
                marker="_",
                s=600,
                linewidths=2.5,
                color=_colour(i),
                label=f"{r.label}: cell median",
            )
        ax.set_xticks(range(len(cells)), [_cell_name(w, s) for w, s in cells])
        ax.set_ylabel(ylabel)
        ax.set_xlabel("workload and concurrent streams")
        ax.set_ylim(bottom=0)
        ax.grid(axis="y", alpha=0.3)
        ax.legend(fontsize=8, loc="upper left")
    axes[0][0].set_title("Latency of every request, per cell (dots), and the cell's median (bar)")
    return Plot(
        "latency",
        "TTFT and ITL distributions per cell",
        "Each dot is one request's raw record; the bar is the cell's median from the result.",
        fig,
    )


# ---- mixed traffic timeline ---------------------------------------------------------------------------


@dataclass(frozen=True)
class Span:
    """One request on the timeline, ms after the long request was sent."""

    who: str
    sent: float
    first_token: Optional[float]
    done: Optional[float]


def mixed_spans(r: BenchResult) -> list[Span]:
    """The long and the short request as recorded (times relative to the long one's send)."""
    m = r.mixed
    if m is None or m.short_sent_after_ms is None or len(m.requests) < 2:
        return []
    long, short = m.requests[0], m.requests[1]
    s0 = m.short_sent_after_ms
    return [
        Span("long", 0.0, m.long_ttft_ms, long.e2el_ms),
        Span(
            "short",
            s0,
            None if m.short_ttft_ms is None else s0 + m.short_ttft_ms,
            None if short.e2el_ms is None else s0 + short.e2el_ms,
        ),
    ]


def mixed_timeline(results: list[Labeled]) -> Optional[Plot]:
    runs = [(i, r, mixed_spans(r.result)) for i, r in enumerate(results)]
    runs = [x for x in runs if x[2]]
    if not runs:
        return None
    fig, axes = _figure(len(runs), 1, height=2.6)
    for row, (i, r, spans) in enumerate(runs):
        ax = axes[row][0]
        m = r.result.mixed
        if m is None:  # mixed_spans found spans: the run has its mixed part
            continue
        for y, sp in enumerate(spans):
            wait_end = sp.first_token if sp.first_token is not None else sp.done
            if wait_end is not None:  # waiting for the first token: queue + prefill
                ax.broken_barh(
                    [(sp.sent, wait_end - sp.sent)], (y - 0.3, 0.6), color=_colour(i), alpha=0.35, gid=f"{sp.who}-wait"
                )
            if sp.first_token is not None and sp.done is not None:  # generating
                ax.broken_barh(
                    [(sp.first_token, max(sp.done - sp.first_token, 0.0))],
                    (y - 0.3, 0.6),
                    color=_colour(i),
                    gid=f"{sp.who}-generate",
                )
            ax.plot([sp.sent], [y], marker=">", color="black", gid=f"{sp.who}-sent")
            if sp.done is not None:
                ax.plot([sp.done], [y], marker="|", markersize=14, color="black", gid=f"{sp.who}-done")
        if m.long_admitted_after_ms is not None:
            ax.axvline(
                m.long_admitted_after_ms,
                color="grey",
                linestyle="--",
                gid="long-admitted",
                label="long request admitted (/metrics)",
            )
            ax.legend(loc="lower right", fontsize=8)
        tokens = m.long_prompt_tokens or m.long_target_prompt_tokens
        ax.set_yticks(range(len(spans)), [f"long ({tokens:,} tokens)", f"short ({m.short_prompt_tokens or '?'} tokens)"])
        ax.set_xlabel("time since the long request was sent (ms)")
        ax.set_ylabel("request (prompt size)")
        ax.set_title(
            f"{r.label}: light = waiting for the first token, dark = generating; "
            f"short waited {m.short_wait_ms or 0:,.0f} ms extra",
            fontsize=10,
        )
        ax.grid(axis="x", alpha=0.3)
        ax.set_ylim(-0.7, len(spans) - 0.3)
    return Plot(
        "mixed-timeline",
        "Mixed traffic: a short request behind a long prefill",
        "When the long prompt was sent, admitted and answered, and when the short request was sent, "
        "got its first token and finished.",
        fig,
    )


FIGURES = (throughput, acceptance_context, latency, mixed_timeline)


def figures(results: list[Labeled]) -> list[Plot]:
    """Every figure the results have data for, in report order."""
    return [p for p in (make(results) for make in FIGURES) if p is not None]
