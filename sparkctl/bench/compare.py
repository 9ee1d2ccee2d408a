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
    import json

    from pydantic import ValidationError

    try:
        doc = json.loads(Path(path).read_text())
    except OSError as err:
        raise InputError(f"cannot read {path}: {err.strerror}", fix="pass result files written by `sparkctl bench --out`") from err
    except ValueError as err:
        raise InputError(f"{path} is not JSON ({err})", fix="pass result files written by `sparkctl bench --out`") from err
    try:
        return BenchResult.model_validate(doc)
    except ValidationError as err:
        first = err.errors()[0]
        where = ".".join(str(x) for x in first["loc"])
        raise InputError(
            f"{path} is not a sparkctl bench result ({where}: {first['msg']})",
            fix="pass result files written by `sparkctl bench --out` (schema: `sparkctl bench schema`)",
        ) from err


def _ratio(a: Optional[float], b: Optional[float]) -> Optional[float]:
    return b / a if a not in (None, 0) and b is not None else None


def compare(a: BenchResult, b: BenchResult, a_path: str = "A", b_path: str = "B") -> Comparison:
    rows: list[Row] = []

    def add(section, metric, unit, va, vb, higher_is_better=True):
        if va is None and vb is None:
            return
        rows.append(Row(section=section, metric=metric, unit=unit, a=va, b=vb, ratio=_ratio(va, vb),
                        higher_is_better=higher_is_better))

    cells = list(dict.fromkeys([(c.workload, c.streams) for c in a.throughput + b.throughput]))
    for w, s in cells:
        ca, cb = a.cell(w, s), b.cell(w, s)
        g = lambda c, f: getattr(c, f) if c is not None else None  # noqa: E731
        name = f"{w} x{s}"
        add("throughput", f"{name} output_throughput", "tok/s", g(ca, "output_throughput"), g(cb, "output_throughput"))
        add("throughput", f"{name} per_stream_output_throughput", "tok/s",
            g(ca, "per_stream_output_throughput"), g(cb, "per_stream_output_throughput"))
        add("throughput", f"{name} median_ttft_ms", "ms", g(ca, "median_ttft_ms"), g(cb, "median_ttft_ms"), False)
        add("throughput", f"{name} median_itl_ms", "ms", g(ca, "median_itl_ms"), g(cb, "median_itl_ms"), False)
        add("throughput", f"{name} spec_decode_acceptance_length", "tokens",
            g(ca, "spec_decode_acceptance_length"), g(cb, "spec_decode_acceptance_length"))
    sizes = list(dict.fromkeys([p.target_prompt_tokens for p in a.context + b.context]))
    for size in sizes:
        pa = next((p for p in a.context if p.target_prompt_tokens == size), None)
        pb = next((p for p in b.context if p.target_prompt_tokens == size), None)
        add("context", f"{size} tokens spec_decode_acceptance_length", "tokens",
            pa.spec_decode_acceptance_length if pa else None, pb.spec_decode_acceptance_length if pb else None)
        add("context", f"{size} tokens decode_throughput", "tok/s",
            pa.decode_throughput if pa else None, pb.decode_throughput if pb else None)
    if a.prefill or b.prefill:
        pa, pb = a.prefill, b.prefill
        add("prefill", "ttft_ms", "ms", pa and pa.ttft_ms, pb and pb.ttft_ms, False)
        add("prefill", "ttft_adjusted_ms", "ms", pa and pa.ttft_adjusted_ms, pb and pb.ttft_adjusted_ms, False)
        add("prefill", "prefill_throughput_adjusted", "tok/s",
            pa and pa.prefill_throughput_adjusted, pb and pb.prefill_throughput_adjusted)
    if a.mixed or b.mixed:
        ma, mb = a.mixed, b.mixed
        add("mixed", "short_ttft_ms", "ms", ma and ma.short_ttft_ms, mb and mb.short_ttft_ms, False)
        add("mixed", "short_wait_ms", "ms", ma and ma.short_wait_ms, mb and mb.short_wait_ms, False)
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
