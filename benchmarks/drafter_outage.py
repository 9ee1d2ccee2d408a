#!/usr/bin/env python3
"""How long a drafter-only reload leaves the head without its drafter, on the lab.

    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/drafter_outage.py [--runs 4] [--json]

The engine keeps serving through a drafter-only reload, but the head's overlay checks the remote
drafter's /health (in the lab's simulator: every 1 s, and 3 failed checks in a row stop the engine:
lab/sparkctl_lab/sim/server.py DRAFTER_LOST_CHECKS). The outage that matters is the one the head
sees, so a prober on the head's host asks the drafter's /health every 20 ms for the whole reload and
reports the longest run of unanswered polls. Beside it: the head's own failed checks (its log) and
the runtime step's seconds on the offload host.

Each run reloads to the drafter under a second tag of the same image (`:drafter`, as
tests/lab/test_reload_plan_lab.py does) and back, so two drafter-only reloads per run and the lab is
left on its own inventory. Run it beside `stress --cpu 1` to see the margin under load. Prints
figures (median and worst); asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from labbench import INVENTORY, converge, log, require_lab, sparkctl

# the prober, run on the head's host: one line per poll that changes the answer ("up"/"down" and the time)
PROBER = r"""
import http.client, sys, time
host, port = sys.argv[1], int(sys.argv[2])
last = None
while True:
    try:
        c = http.client.HTTPConnection(host, port, timeout=0.5)
        c.request("GET", "/health")
        up = c.getresponse().status == 200
        c.close()
    except OSError:
        up = False
    if up != last:
        print(("up" if up else "down"), time.monotonic(), flush=True)
        last = up
    time.sleep(0.02)
"""


def longest_down(lines: list[str]) -> float:
    """The longest time between a `down` line and the next `up` one (the prober's transitions)."""
    worst, down_at = 0.0, None
    for line in lines:
        state, t = line.split()
        if state == "down":
            down_at = float(t)
        elif down_at is not None:
            worst, down_at = max(worst, float(t) - down_at), None
    return worst


def failed_checks(head_log: str) -> int:
    """The most failed checks in a row the head logged (the simulator's overlay lines)."""
    counts = [int(n) for n in re.findall(r"did not answer /health \((\d+) of \d+ checks\)", head_log)]
    return max(counts, default=0)


def one_reload(current: Path, new: Path, drafter: str) -> dict:
    from sparkctl_lab.api import host_exec
    from sparkctl_lab.hostexec import init_pid

    host, port = drafter.rsplit(":", 1)
    since = time.time()
    prober = subprocess.Popen(
        ["nsenter", "-t", str(init_pid("head")), "-n", "--", sys.executable, "-c", PROBER, host, port],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        time.sleep(0.5)  # the prober's first answer: up
        rc, doc = sparkctl("reload", "-i", str(current), "--config", str(new), "--yes")
        time.sleep(0.5)
    finally:
        prober.terminate()
        out, _ = prober.communicate(timeout=10)
    if rc != 0 or doc.get("outcome") != "ok":
        sys.exit(f"reload {current.name} -> {new.name} failed ({doc.get('outcome')}): {doc.get('reason')}")
    log_text = host_exec("head", ["sh", "-c", f"docker logs --since {int(since)} sparkctl-head 2>&1"]).stdout
    return {
        "to": new.name,
        "outage_seconds": round(longest_down(out.split("\n")[:-1]), 3),
        "head_failed_checks": failed_checks(log_text),
        "runtime_offload_seconds": sum(r["seconds"] for r in doc["results"] if r["step"] == "runtime" and r["host"] == "offload"),
    }


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=4, help="runs of two drafter-only reloads (there and back)")
    ap.add_argument("--json", action="store_true", help="one JSON document on stdout")
    args = ap.parse_args()
    lock = require_lab()  # noqa: F841 (held until exit)
    from sparkctl_lab.api import host_exec

    converge()
    inv = yaml.safe_load(INVENTORY.read_text())
    image = inv["runtime"]["image"]
    other = image.rsplit(":", 1)[0] + ":drafter"
    host_exec("head", ["sh", "-c", f"docker tag {image} {other} && docker push -q {other}"], check=True)
    # the drafter as the head reaches it (the simulator's overlay reads SPLICE_DRAFTER_URL)
    env = host_exec("head", ["docker", "inspect", "-f", "{{json .Config.Env}}", "sparkctl-head"], check=True).stdout
    url = next(e.split("=", 1)[1] for e in json.loads(env) if e.startswith("SPLICE_DRAFTER_URL="))
    drafter = url.split("//", 1)[1].rstrip("/")
    runs: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="sparkctl-bench-drafter-") as tmp:
        there = Path(tmp) / "drafter.yaml"
        inv["runtime"]["speculative"]["drafter_image"] = other
        there.write_text(yaml.safe_dump(inv, sort_keys=False))
        for i in range(args.runs):
            for current, new in ((INVENTORY, there), (there, INVENTORY)):
                r = one_reload(current, new, drafter)
                runs.append(r)
                log(
                    f"run {i + 1} -> {r['to']}: outage {r['outage_seconds']:.2f} s, head's failed checks {r['head_failed_checks']}"
                )
    outages = [r["outage_seconds"] for r in runs]
    result = {
        "reloads": len(runs),
        "outage_median_seconds": round(statistics.median(outages), 3),
        "outage_worst_seconds": max(outages),
        "head_failed_checks_worst": max(r["head_failed_checks"] for r in runs),
        "runs": runs,
    }
    if args.json:
        print(json.dumps(result, indent=2))
    out = sys.stderr if args.json else sys.stdout
    print(f"drafter-only reloads on the lab: {len(runs)}", file=out)
    print(
        f"outage seen from the head's host: median {result['outage_median_seconds']:.2f} s, worst {max(outages):.2f} s", file=out
    )
    print(f"the head's failed checks in a row (3 stop the engine): worst {result['head_failed_checks_worst']}", file=out)


if __name__ == "__main__":
    main()
