"""`sparkctl bench compare A.json B.json`: two result files side by side, with B/A ratios."""

from __future__ import annotations

from pathlib import Path
from typing import Optional

from pydantic import BaseModel

from sparkctl.bench.result import BenchResult
from sparkctl.errors import InputError


class Row(BaseModel):
    section: str
    metric: str
    unit: str
    a: Optional[float]
    b: Optional[float]
    ratio: Optional[float]  # b / a
    higher_is_better: bool


class Comparison(BaseModel):
    a: str
    b: str
    a_label: str
    b_label: str
    rows: list[Row]


def load(path: Path) -> BenchResult:
    from pydantic import ValidationError

    fix = "pass result files written by `sparkctl bench --out` (schema: `sparkctl bench schema`)"
    try:
        return BenchResult.model_validate_json(Path(path).read_bytes())
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror}", fix=fix) from err
    except ValidationError as err:  # not JSON, or not a result
        first = err.errors()[0]
        where = ".".join(map(str, first["loc"]))
        raise InputError(
            f"{path} is not a sparkctl bench result ({where + ': ' if where else ''}{first['msg']})", fix=fix
        ) from err


# What compare shows per section: (field, unit, higher is better).
CELL_METRICS = (
    ("output_throughput", "tok/s", True),
    ("per_stream_output_throughput", "tok/s", True),
    ("median_ttft_ms", "ms", False),
    ("median_itl_ms", "ms", False),
    ("spec_decode_acceptance_length", "tokens", True),
)
CONTEXT_METRICS = (("spec_decode_acceptance_length", "tokens", True), ("decode_throughput", "tok/s", True))
PREFILL_METRICS = (("ttft_ms", "ms", False), ("ttft_adjusted_ms", "ms", False), ("prefill_throughput_adjusted", "tok/s", True))
MIXED_METRICS = (("short_ttft_ms", "ms", False), ("short_wait_ms", "ms", False))


def _rows(section: str, prefix: str, a, b, metrics) -> list[Row]:
    """One row per metric either side has (a or b may be None: that side did not measure it)."""
    rows = []
    for field, unit, higher_is_better in metrics:
        va, vb = getattr(a, field, None), getattr(b, field, None)
        if va is None and vb is None:
            continue
        rows.append(
            Row(
                section=section,
                metric=f"{prefix}{field}",
                unit=unit,
                a=va,
                b=vb,
                ratio=vb / va if va and vb is not None else None,
                higher_is_better=higher_is_better,
            )
        )
    return rows


def compare(a: BenchResult, b: BenchResult, a_path: str = "A", b_path: str = "B") -> Comparison:
    rows: list[Row] = []
    for w, s in dict.fromkeys((c.workload, c.streams) for c in a.throughput + b.throughput):
        rows += _rows("throughput", f"{w} x{s} ", a.cell(w, s), b.cell(w, s), CELL_METRICS)
    for size in dict.fromkeys(p.target_prompt_tokens for p in a.context + b.context):
        pa, pb = (next((p for p in r.context if p.target_prompt_tokens == size), None) for r in (a, b))
        rows += _rows("context", f"{size} tokens ", pa, pb, CONTEXT_METRICS)
    rows += _rows("prefill", "", a.prefill, b.prefill, PREFILL_METRICS)
    rows += _rows("mixed", "", a.mixed, b.mixed, MIXED_METRICS)
    return Comparison(a=a_path, b=b_path, a_label=_label(a), b_label=_label(b), rows=rows)


def _label(r: BenchResult) -> str:
    return f"{r.model} @ {r.endpoint} ({r.started_at:%Y-%m-%d %H:%M})"


def render(cmp: Comparison, console) -> None:
    from rich.table import Table

    from sparkctl.bench.report import fmt

    table = Table(title=f"A = {cmp.a}: {cmp.a_label}\nB = {cmp.b}: {cmp.b_label}", title_justify="left")
    for col in ("metric", "A", "B", "B/A"):
        table.add_column(col, justify="left" if col == "metric" else "right")
    section = None
    for r in cmp.rows:
        if r.section != section:
            if section is not None:
                table.add_section()
            section = r.section
        ratio = "-" if r.ratio is None else f"{r.ratio:.2f}x"
        if r.ratio is not None and abs(r.ratio - 1) >= 0.05:
            better = (r.ratio > 1) == r.higher_is_better
            ratio = f"[{'green' if better else 'red'}]{ratio}[/]"
        digits = 2 if r.unit == "tokens" else 1
        table.add_row(r.metric, f"{fmt(r.a, r.unit, digits)}", f"{fmt(r.b, r.unit, digits)}", ratio)
    console.print(table)
