#!/usr/bin/env python3
"""No-op `sparkctl up` wall time on the lab against the floor, and cold vs warm runtime start.

    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/up_noop.py [--runs 5] [--cold-warm]

Floor: one parallel SSH round trip to every host doing nothing (OpenSSH `ssh -F <lab config> HOST
true`, all hosts at once), what any tool must pay. The no-op run is `sparkctl up` on a lab that
is already converged (the script runs one `up` first to get there). With --cold-warm it also
measures a restart with the persistent cache volume emptied (cold: torch.compile, Triton, FlashInfer) and one with them kept (warm).
Holds the lab test lock while it runs. Prints figures; asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from labbench import INVENTORY, LAB_DIR, require_lab

ROOT = Path(__file__).resolve().parents[1]
SSH_CONFIG = LAB_DIR / "ssh" / "config"
HOSTS = ["head", "worker", "offload"]
# As installed: bytecode cached (pip compiles it at install; an editable checkout writes it on the
# first run, which the converging `up` below is). PYTHONDONTWRITEBYTECODE would add ~0.1 s of
# compiling to every run, which no operator pays.
ENV = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
ENV["SPARKCTL_ONLY_NETWORKS"] = "127.0.0.0/8,10.231.0.0/16"
SPARKCTL = [sys.executable, "-m", "sparkctl"]


def wall(cmd: list[str]) -> tuple[float, subprocess.CompletedProcess]:
    t0 = time.perf_counter()
    p = subprocess.run(cmd, capture_output=True, text=True, env=ENV)
    return time.perf_counter() - t0, p


def floor_once() -> float:
    t0 = time.perf_counter()
    procs = [subprocess.Popen(["ssh", "-F", str(SSH_CONFIG), h, "true"]) for h in HOSTS]
    for p in procs:
        p.wait()
    return time.perf_counter() - t0


def up(*extra: str) -> dict:
    secs, p = wall([*SPARKCTL, "up", "-i", str(INVENTORY), "--json", *extra])
    if p.returncode != 0:
        sys.exit(f"sparkctl up failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    doc = json.loads(p.stdout)
    doc["wall"] = secs
    return doc


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=5)
    ap.add_argument("--cold-warm", action="store_true", help="also measure cold vs warm runtime restarts")
    args = ap.parse_args()
    lock = require_lab()  # noqa: F841 (held until exit: no test session runs beside the figures)

    print("converging the lab once (sparkctl up) ...", file=sys.stderr)
    first = up()
    print(f"first up: changed={first['changed']} in {first['wall']:.2f} s", file=sys.stderr)

    floors = [floor_once() for _ in range(args.runs)]
    noops = []
    for _ in range(args.runs):
        doc = up()
        if doc["changed"]:
            sys.exit(f"a no-op up changed something: {doc['changed']} change(s)")
        noops.append(doc["wall"])
    med_floor, med_noop = statistics.median(floors), statistics.median(noops)
    print(
        f"floor: 3 parallel SSH round trips (OpenSSH)   median {med_floor:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in floors)})"
    )
    print(f"no-op `sparkctl up` (0 changed)              median {med_noop:.3f} s  (runs: {', '.join(f'{x:.3f}' for x in noops)})")
    print(f"no-op / floor: {med_noop / med_floor:.2f}x   budget 1.0 s: {'within' if med_noop <= 1.0 else 'OVER'}")

    if args.cold_warm:
        cache = "/var/lib/sparkctl/cache"  # caches.host_path in the lab inventory
        for h in HOSTS:
            subprocess.run(["ssh", "-F", str(SSH_CONFIG), h, f"rm -rf {cache}/* {cache}/.cache"], check=True)
        cold = up("--force")
        warm = up("--force")
        c, w = cold["runtime_start"], warm["runtime_start"]
        print(
            f"cold restart (compile caches emptied): runtime serving after {c['seconds']:.2f} s ({c['cache']}); up wall {cold['wall']:.2f} s"
        )
        print(
            f"warm restart (caches kept):            runtime serving after {w['seconds']:.2f} s ({w['cache']}); up wall {warm['wall']:.2f} s"
        )
        print(f"warm / cold: {w['seconds'] / c['seconds']:.2f}  (target <= 0.25)")


if __name__ == "__main__":
    main()
