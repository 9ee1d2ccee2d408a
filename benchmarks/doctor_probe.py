#!/usr/bin/env python3
"""What the rails' bandwidth probe (fabric.bandwidth) adds to a doctor run on the lab.

    sudo .venv/bin/python benchmarks/doctor_probe.py [--repeats 3]

`sparkctl doctor --json` as the tests run it, with the probe and with `--ignore fabric.bandwidth`,
for the whole doctor, `--only fabric` and `--deep`; prints the median wall time of each and the
difference. The probe is real traffic over the lab's veths (iperf3, PROBE_SECONDS per sibling
group, DEEP_SECONDS with --deep, groups one after another), not a simulated wait: iperf3 3.12
takes whole seconds (`-t 0.3` is read as 0, which runs until killed), and a shorter, byte-bounded
test would read a token bucket's burst (the lab's degraded-speed fault) as the rail's rate.
Holds the lab test lock while it runs. Prints figures; asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import statistics
import subprocess
import time

from labbench import ENV, INVENTORY, SPARKCTL, require_lab

RUNS = {
    "doctor": [],
    "doctor --only fabric": ["--only", "fabric"],
    "doctor --deep": ["--deep"],
}


def wall(args: list[str]) -> float:
    t0 = time.perf_counter()
    p = subprocess.run([*SPARKCTL, "doctor", "-i", str(INVENTORY), "--json", *args], capture_output=True, text=True, env=ENV)
    took = time.perf_counter() - t0
    if p.returncode not in (0, 1):  # 1: a check failed, still a whole run
        raise SystemExit(f"doctor {' '.join(args)} exited {p.returncode}: {p.stderr[-1000:]}")
    return took


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    _lock = require_lab()  # noqa: F841 (held until exit)
    wall([])  # warm-up: bytecode, first connections
    print(f"median of {args.repeats} runs, wall seconds")
    print(f"{'':24} {'with probe':>11} {'without':>9} {'probe':>7}")
    for label, extra in RUNS.items():
        with_ = statistics.median(wall(extra) for _ in range(args.repeats))
        without = statistics.median(wall([*extra, "--ignore", "fabric.bandwidth"]) for _ in range(args.repeats))
        print(f"{label:24} {with_:11.2f} {without:9.2f} {with_ - without:7.2f}")


if __name__ == "__main__":
    main()
