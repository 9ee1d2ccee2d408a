#!/usr/bin/env python3
"""What one host's facts gather costs the whole machine: the one-round-trip script (facts/probe.py)
for every fact a doctor reads, run in each lab host's namespaces, N times.

    sudo .venv/bin/python benchmarks/gather_cost.py [--rounds 20]   # the lab up (`sparkctl lab up`)

The figure is the machine's busy time (/proc/stat, every process: the shell, the docker CLI and
daemon, the simulated tools) per gather, and its wall time; SSH itself is left out (the script
runs through `sparkctl_lab.hostexec`). Run it on an otherwise idle machine. Asserts nothing.
"""

from __future__ import annotations

import argparse
import os
import time

from sparkctl.facts import base
from sparkctl.facts.host import background_keys, probes_for
from sparkctl.facts.probe import build_script
from sparkctl.inventory.loader import load_inventory
from sparkctl_lab import paths
from sparkctl_lab.hostexec import host_exec

HZ = os.sysconf("SC_CLK_TCK")
SKIP = {"engram_rehash", "history"}  # asked only by a repair and by `history`: not a doctor's read


def busy_s() -> float:
    v = list(map(int, open("/proc/stat").readline().split()[1:]))
    return (sum(v) - v[3] - v[4]) / HZ


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rounds", type=int, default=20)
    args = ap.parse_args()
    inv = load_inventory(str(paths.INVENTORY_PATH))
    kinds = set(base.registry()) - SKIP
    for host in inv.hosts:
        probes = probes_for(inv, host, kinds)
        script = build_script(probes, "@@bench", background_keys(probes))
        host_exec(host, ["sh", "-c", script], timeout=60)  # warm: page cache, docker's first answer
        cpu, t = busy_s(), time.monotonic()
        for _ in range(args.rounds):
            host_exec(host, ["sh", "-c", script], timeout=60)
        n = args.rounds
        print(f"{host:8s} {len(probes):3d} probes  {(busy_s() - cpu) / n * 1000:6.0f} ms machine CPU  "
              f"{(time.monotonic() - t) / n * 1000:6.0f} ms wall per gather")  # fmt: skip


if __name__ == "__main__":
    main()
