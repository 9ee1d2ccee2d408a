#!/usr/bin/env python3
"""What the lab's second Spark pair costs (`sparkctl lab up --clusters 2`). Needs root; holds the
lab's test lock for its run and always leaves the lab with one pair.

    python benchmarks/lab_pairs.py [--seconds 10] [--serve] [--json]

Measures, from a one-pair lab:
  add     wall time of `sparkctl lab up --clusters 2` (the CLI, as a user runs it)
  noop    wall time of a plain `sparkctl lab up` on the two-pair lab
  idle    CPU (percent of one core) and memory (RSS, PSS) of every process of the second pair
          (all that runs in lab-head2 / lab-worker2: host inits, sshd, dockerd, containerd) over
          --seconds with nothing running on it
  serve   with --serve: `sparkctl up -i inventory-2.yaml` (wall), then the same idle figures
          with the pair's runtime up and no request
  remove  wall time of `sparkctl lab up --clusters 1`
Prints the figures; asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

from labbench import ENV, SPARKCTL, log, require_lab

TICK = os.sysconf("SC_CLK_TCK")
PAIR_NETNS = ("lab-head2", "lab-worker2")


def timed_cli(*args: str) -> float:
    t0 = time.monotonic()
    p = subprocess.run([*SPARKCTL, *args], capture_output=True, text=True, env=ENV, timeout=1800)
    if p.returncode != 0:
        sys.exit(f"sparkctl {' '.join(args)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")
    return time.monotonic() - t0


def pair_pids() -> list[int]:
    inodes = {os.stat(f"/run/netns/{n}").st_ino for n in PAIR_NETNS}
    out = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            if os.stat(f"/proc/{pid}/ns/net").st_ino in inodes:
                out.append(int(pid))
        except OSError:
            pass
    return out


def cpu_seconds(pid: int) -> float:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return 0.0
    return (int(fields[11]) + int(fields[12])) / TICK


def field_kib(pid: int, path: str, name: str) -> int:
    try:
        for ln in Path(f"/proc/{pid}/{path}").read_text().splitlines():
            if ln.startswith(name + ":"):
                return int(ln.split()[1])
    except OSError:
        pass
    return 0


def idle(seconds: float) -> dict:
    time.sleep(2)  # let the daemons settle
    pids = pair_pids()
    before = {p: cpu_seconds(p) for p in pids}
    t0 = time.monotonic()
    time.sleep(seconds)
    wall = time.monotonic() - t0
    used = sum(max(0.0, cpu_seconds(p) - before[p]) for p in pids)  # a process gone meanwhile counts 0
    names: dict[str, int] = {}
    for p in pids:
        try:
            exe = os.path.basename(Path(f"/proc/{p}/cmdline").read_bytes().split(b"\0")[0].decode()) or "?"
        except OSError:
            continue
        names[exe] = names.get(exe, 0) + 1
    return {
        "processes": len(pids),
        "by_name": dict(sorted(names.items())),
        "cpu_percent_of_one_core": round(100 * used / wall, 2),
        "rss_mib": round(sum(field_kib(p, "status", "VmRSS") for p in pids) / 1024, 1),
        "pss_mib": round(sum(field_kib(p, "smaps_rollup", "Pss") for p in pids) / 1024, 1),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=10.0)
    ap.add_argument("--serve", action="store_true", help="also bring the pair's runtime up and measure it idle")
    ap.add_argument("--json", action="store_true")
    args = ap.parse_args()
    lock = require_lab()  # noqa: F841 (held until exit)
    from sparkctl_lab import api

    out: dict = {}
    timed_cli("lab", "up", "--clusters", "1")  # start from one pair
    try:
        log("adding the second pair")
        out["add_s"] = round(timed_cli("lab", "up", "--clusters", "2"), 2)
        out["noop_s"] = round(timed_cli("lab", "up"), 2)
        log(f"idle second pair ({args.seconds:g} s)")
        out["idle"] = idle(args.seconds)
        if args.serve:
            log("sparkctl up -i inventory-2.yaml")
            out["serve_up_s"] = round(timed_cli("up", "-i", str(api.INVENTORY_2_PATH)), 2)
            out["idle_serving"] = idle(args.seconds)
    finally:
        log("removing the second pair")
        out["remove_s"] = round(timed_cli("lab", "up", "--clusters", "1"), 2)
    if args.json:
        print(json.dumps(out, indent=1))
        return 0
    print(f"lab up --clusters 2 (from one pair): {out['add_s']:.1f} s   plain lab up after: {out['noop_s']:.1f} s")
    for key, what in (("idle", "second pair idle (no runtime)"), ("idle_serving", "second pair serving, no request")):
        if key in out:
            i = out[key]
            print(
                f"{what}: {i['cpu_percent_of_one_core']:.2f}% of one core, RSS {i['rss_mib']:.0f} MiB, PSS {i['pss_mib']:.0f} MiB, "
                f"{i['processes']} processes {i['by_name']}"
            )
    if "serve_up_s" in out:
        print(f"sparkctl up -i inventory-2.yaml: {out['serve_up_s']:.1f} s")
    print(f"lab up --clusters 1 (removal): {out['remove_s']:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
