#!/usr/bin/env python3
"""`sparkctl bench` on the lab under both executors (issue 21): ray, then mp, then ray again.

    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/executors.py [--repeats 3]

The simulator models no difference between `distributed_executor_backend: ray` and `mp` (the same
step model; only the launch and the failure modes differ), so equal figures within noise show
sparkctl's mp launch added none. Each executor is converged with `sparkctl up` and measured with the
throughput part of the sparkdash protocol (3 workloads x 1/4 streams). The two ray runs bound the
noise. The lab is left on its own inventory (ray); the lab test lock (tests/conftest.py) is held for
the whole run. Prints figures; asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import json
import sys
import tempfile
from pathlib import Path

import yaml

from labbench import INVENTORY, log, require_lab, sparkctl  # benchmarks/ is on the path: the script's folder


def measure(inv: Path, out: Path, repeats: int) -> dict[str, float]:
    rc, doc = sparkctl("up", "-i", str(inv))
    if rc != 0:
        sys.exit(f"sparkctl up -i {inv} failed: {json.dumps(doc)[-2000:]}")
    rc, doc = sparkctl("bench", "-i", str(inv), "--parts", "throughput", "--repeats", str(repeats), "--out", str(out))
    if rc != 0 or not out.exists():
        sys.exit(f"sparkctl bench failed (exit {rc}): {json.dumps(doc)[-2000:]}")
    from sparkctl.bench.result import BenchResult

    r = BenchResult.model_validate_json(out.read_text())
    return {f"{c.workload} x{c.streams}": c.output_throughput for c in r.throughput}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3, help="repeats per cell (sparkctl bench reports the median)")
    args = ap.parse_args()
    lock = require_lab()  # noqa: F841 (held until exit)
    with tempfile.TemporaryDirectory(prefix="sparkctl-bench-executors-") as tmp:
        doc = yaml.safe_load(INVENTORY.read_text())
        doc["runtime"]["distributed_executor_backend"] = "mp"
        mp = Path(tmp) / "lab-mp.yaml"
        mp.write_text(yaml.safe_dump(doc))
        runs: dict[str, dict[str, float]] = {}
        try:
            for label, inv in (("ray", INVENTORY), ("mp", mp), ("ray again", INVENTORY)):
                log(f"{label}: sparkctl up, then sparkctl bench --parts throughput ...")
                runs[label] = measure(inv, Path(tmp) / f"{label.replace(' ', '-')}.json", args.repeats)
        finally:
            sparkctl("up", "-i", str(INVENTORY))
    print("| cell | ray tok/s | mp tok/s | ray again tok/s | mp / ray | ray again / ray |")
    print("| --- | --- | --- | --- | --- | --- |")
    for cell, base in runs["ray"].items():
        mp_v, again = runs["mp"].get(cell), runs["ray again"].get(cell)
        ratio = lambda v, base=base: f"{v / base:.3f}" if v and base else "-"  # noqa: E731
        print(f"| {cell} | {base:.1f} | {mp_v or 0:.1f} | {again or 0:.1f} | {ratio(mp_v)} | {ratio(again)} |")


if __name__ == "__main__":
    main()
