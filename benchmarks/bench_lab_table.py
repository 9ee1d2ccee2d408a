#!/usr/bin/env python3
"""The full default sparkdash protocol (seed 000) against one endpoint, printed as the seed's table.

    python benchmarks/bench_lab_table.py http://10.231.0.11:8888/v1 [--model NAME] [--out FILE]

Runs `sparkctl bench` with every default (3 workloads x 1/4 streams, 400 tokens, 3 repeats, the
context sweep, ~262K-token prefill, mixed traffic), then prints the table as Markdown on stdout,
with acceptance per cell, the sweep, prefill and the mixed-traffic wait below it. Figures only;
it asserts nothing (timings are not tests). Extra sparkctl bench options can follow `--`.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("endpoint", help="OpenAI-compatible base URL, e.g. http://10.231.0.11:8888/v1")
    ap.add_argument("--model", help="model id (default: the only one the endpoint serves)")
    ap.add_argument("--out", type=Path, help="keep the result file here")
    ap.add_argument("extra", nargs="*", help="more `sparkctl bench` options, after --")
    args = ap.parse_args()

    out = args.out or Path(tempfile.mkdtemp(prefix="bench-")) / "result.json"
    cmd = [sys.executable, "-m", "sparkctl", "bench", "--endpoint", args.endpoint, "--out", str(out), *args.extra]
    if args.model:
        cmd += ["--model", args.model]
    env = {**os.environ, "SPARKCTL_ONLY_NETWORKS": os.environ.get("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")}
    rc = subprocess.run(cmd, env=env, cwd=ROOT).returncode  # progress and the rich table go to stderr
    if not out.exists():
        return rc or 1

    from sparkctl.bench.report import fmt, markdown_table, summary_lines
    from sparkctl.bench.result import BenchResult

    r = BenchResult.model_validate_json(out.read_text())
    print(
        f"`sparkctl bench` against {r.model} at {r.endpoint} ({r.started_at:%Y-%m-%d %H:%M} UTC, "
        f"{r.options.max_tokens} tokens, {r.options.repeats} repeats, median aggregate output tok/s):\n"
    )
    print(markdown_table(r))
    print("\n| Workload | Streams | Acceptance length | Acceptance rate | Median TTFT | Per-stream tok/s |")
    print("| --- | --- | --- | --- | --- | --- |")
    for c in r.throughput:
        print(
            f"| {c.workload} | {c.streams} | {fmt(c.spec_decode_acceptance_length, digits=2)} | "
            f"{fmt(c.spec_decode_acceptance_rate, '%')} | {fmt(c.median_ttft_ms, 'ms')} | "
            f"{fmt(c.per_stream_output_throughput)} |"
        )
    if r.context:
        print(
            "\nAcceptance length against context ("
            + r.context[0].workload
            + "): "
            + ", ".join(
                f"{p.prompt_tokens or p.target_prompt_tokens:,} tokens {fmt(p.spec_decode_acceptance_length, digits=2)}"
                for p in r.context
            )
        )
    for label, text in summary_lines(r):
        print(f"\n{label} {text}.")
    for n in r.notes:
        print(f"- {n}")
    print(f"\nResult file: {out}")
    return rc


if __name__ == "__main__":
    sys.exit(main())
