"""Re-record the iperf3 probe outputs of the lab's rails (root, lab up):

    python tests/unit/recorded/bandwidth/record.py

healthy.json: every rail's client output of doctor's probe (sibling groups as doctor runs them);
degraded.json: the same with `sparkctl lab fault worker degraded-speed enp1s0f0np0` on (the rail
shaped to 1000 Mb/s both ways, its speed file nominal). Each output is iperf3's own `-J`
document with the per-interval records dropped (iperf 3.12, the lab's).
"""

import json
import sys
from pathlib import Path

from sparkctl.facts import bandwidth
from sparkctl.inventory.loader import load_inventory
from sparkctl.transport.ssh import Fleet
from sparkctl_lab import api

HERE = Path(__file__).resolve().parent


def snap(inv) -> dict:
    out = {}
    with Fleet(inv) as fleet:
        every = bandwidth.rails(inv, list(inv.hosts))
        for g, group in enumerate(bandwidth.siblings(every)):
            ports = {r.key: bandwidth.BASE_PORT + 10 * g + i for i, r in enumerate(group)}
            for r in group:
                fleet[r.server].run(bandwidth.server_command(r, ports[r.key]), timeout=10)
            from concurrent.futures import ThreadPoolExecutor

            with ThreadPoolExecutor(len(group)) as pool:
                done = pool.map(
                    lambda r, ports=ports: (r, fleet[r.client].run(bandwidth.client_command(r, ports[r.key]), timeout=40)), group
                )
                for r, res in done:
                    doc = json.loads(res.stdout)
                    doc.pop("intervals", None)
                    out[r.key] = {"rc": res.exit_code, "out": json.dumps(doc, indent=1)}
    return out


def main() -> None:
    inv = load_inventory(api.INVENTORY_PATH)
    api.clear_faults()
    (HERE / "healthy.json").write_text(json.dumps(snap(inv), indent=1) + "\n")
    api.fault("worker", "speed", "enp1s0f0np0")
    try:
        (HERE / "degraded.json").write_text(json.dumps(snap(inv), indent=1) + "\n")
    finally:
        api.clear_faults()


if __name__ == "__main__":
    sys.exit(main())
