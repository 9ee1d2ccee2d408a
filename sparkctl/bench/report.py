"""Human output: the seed's table (workload x streams), then details, the sweep, prefill and mixed traffic."""

from __future__ import annotations

from typing import Optional

from sparkctl.bench.protocol import WORKLOADS
from sparkctl.bench.result import BenchResult


def fmt(value: Optional[float], unit: str = "", digits: int = 1) -> str:
    if value is None:
        return "-"
    return f"{value:,.{digits}f}{(' ' + unit) if unit else ''}"


def seed_rows(result: BenchResult) -> tuple[list[str], list[list[str]]]:
    """Seed 000's table: the stream-count headers, and per workload its title and the median
    aggregate output tok/s of each stream count (the terminal, Markdown and HTML tables)."""
    streams = sorted({c.streams for c in result.throughput})
    header = ["One stream" if s == 1 else f"{s} streams, combined" for s in streams]
    rows = []
    for w in dict.fromkeys(c.workload for c in result.throughput):
        cells = [result.cell(w, s) for s in streams]
        rows.append(
            [WORKLOADS[w].title if w in WORKLOADS else w, *(fmt(c.output_throughput if c else None, "tokens/s") for c in cells)]
        )
    return header, rows


def seed_table(result: BenchResult):
    from rich.table import Table

    header, rows = seed_rows(result)
    table = Table(title=f"{result.model} at {result.endpoint}: median aggregate output tok/s", title_justify="left")
    table.add_column("Workload")
    for h in header:
        table.add_column(h, justify="right")
    for row in rows:
        table.add_row(*row)
    return table


def _num(value: Optional[float], digits: int = 1) -> str:
    """A table figure: fewer decimals for big numbers, so columns stay narrow."""
    if value is None:
        return "-"
    return f"{value:.{0 if abs(value) >= 1000 else digits}f}"


def details_table(result: BenchResult):
    """Every cell's figures; short headers and times in ms so it fits 80 columns."""
    from rich.table import Table

    failed = any(c.failed for c in result.throughput)
    table = Table(title="Per cell (medians; times in ms)", title_justify="left")
    cols = ["workload", "streams", "tok/s", "tok/s\nper\nstream", "TTFT", "ITL", "TPOT", "accept\nlength", "accept\n%"]
    cols += ["failed"] if failed else []
    for col in cols:
        table.add_column(col, justify="left" if col == "workload" else "right", min_width=4)
    for c in result.throughput:
        row = [
            c.workload,
            str(c.streams),
            _num(c.output_throughput),
            _num(c.per_stream_output_throughput),
            _num(c.median_ttft_ms),
            _num(c.median_itl_ms),
            _num(c.median_tpot_ms, 2 if (c.median_tpot_ms or 0) < 10 else 1),
            _num(c.spec_decode_acceptance_length, 2),
            _num(c.spec_decode_acceptance_rate),
        ]
        table.add_row(*row, *([str(c.failed)] if failed else []))
    return table


def context_table(result: BenchResult):
    from rich.table import Table

    table = Table(title=f"Acceptance against context ({result.context[0].workload})", title_justify="left")
    for col in ("prompt tokens", "TTFT ms", "decode tok/s", "accept len", "accept %"):
        table.add_column(col, justify="right")
    for p in result.context:
        table.add_row(
            f"{p.prompt_tokens if p.prompt_tokens is not None else p.target_prompt_tokens:,}",
            fmt(p.median_ttft_ms),
            fmt(p.decode_throughput),
            fmt(p.spec_decode_acceptance_length, digits=2),
            fmt(p.spec_decode_acceptance_rate),
        )
    return table


def summary_lines(result: BenchResult) -> list[tuple[str, str]]:
    """The prefill and mixed-traffic figures as (label, sentence), for the terminal and the page."""
    out = []
    p = result.prefill
    if p is not None:
        tokens = f"{p.prompt_tokens:,}" if p.prompt_tokens else f"~{p.target_prompt_tokens:,}"
        out.append(
            (
                "Prefill",
                f"{tokens} tokens: TTFT {fmt(p.ttft_ms, 'ms')} raw, {fmt(p.ttft_adjusted_ms, 'ms')} "
                f"less {fmt(p.overhead_ms, 'ms')} fixed overhead; "
                f"{fmt(p.prefill_throughput_adjusted)} tok/s adjusted ({fmt(p.prefill_throughput)} raw)",
            )
        )
    m = result.mixed
    if m is not None:
        tokens = f"{m.long_prompt_tokens:,}" if m.long_prompt_tokens else f"~{m.long_target_prompt_tokens:,}"
        late = "" if m.short_sent_during_prefill is not False else " (sent after the prefill ended)"
        out.append(
            (
                "Mixed traffic",
                f"a short request sent {fmt(m.short_sent_after_ms, 'ms', 0)} after a cold "
                f"{tokens}-token prompt: TTFT {fmt(m.short_ttft_ms, 'ms')} "
                f"(alone {fmt(m.short_ttft_alone_ms, 'ms')}), "
                f"waited {fmt(m.short_wait_ms, 'ms')} extra{late}",
            )
        )
    return out


def render(result: BenchResult, console) -> None:
    """Everything a person reads after a run, on the given (stderr) console."""
    if result.throughput:
        console.print(seed_table(result))
        console.print(details_table(result))
    if result.context:
        console.print(context_table(result))
    for label, text in summary_lines(result):
        console.print(f"[bold]{label}[/] {text}")
    for note in result.notes:
        console.print(f"[dim]note:[/] {note}", soft_wrap=True)


def markdown_table(result: BenchResult) -> str:
    """The seed's table as Markdown (for notes and issues)."""
    header, rows = seed_rows(result)
    lines = ["| Workload | " + " | ".join(header) + " |", "| --- |" + " --- |" * len(header)]
    return "\n".join(lines + ["| " + " | ".join(row) + " |" for row in rows])
