#!/usr/bin/env python3
"""Image side-load throughput against a raw SSH stream on the same link, both paths sparkctl uses.

    python benchmarks/sideload.py [--runs 3] [--mb 400]

Builds a throwaway image of --mb random (incompressible) bytes on the lab's head, then per run:
- fabric path: `docker save | ssh <worker fabric ip> docker load` run on the head (what `up
  --side-load` does when nodes can SSH each other), against `head -c N /dev/zero | ssh <same ip>
  'cat >/dev/null'` on the same head;
- relay path: sparkctl's relay through this machine (`stream_image`), against the same relay
  carrying N zero bytes (`head -c N /dev/zero` -> `cat >/dev/null`) over the same two connections.
Prints MB/s and the ratios (target >= 0.80); asserts nothing. Removes the image afterwards.
"""

from __future__ import annotations

import argparse
import os
import statistics
import time
from pathlib import Path

LAB_INVENTORY = Path("/var/lib/sparkctl-lab/inventory.yaml")
IMAGE = "sparkctl-bench/blob:1"
WORKER_FABRIC_IP = "10.231.100.3"


def timed_on(session, command: str) -> float:
    """Seconds the command takes on the host itself (its own clock: no SSH round trip counted)."""
    r = session.run(["bash", "-o", "pipefail", "-c", f"t0=$(date +%s.%N); {command}; t1=$(date +%s.%N); echo $t0 $t1"])
    r.check(command[:60])
    t0, t1 = map(float, r.stdout.split()[-2:])
    return t1 - t0


def raw_relay(src, dst, n: int) -> float:
    from sparkctl.steps.images import PACKET, WINDOW

    a = src.paramiko_client.get_transport().open_session(window_size=WINDOW, max_packet_size=PACKET)
    b = dst.paramiko_client.get_transport().open_session(window_size=WINDOW, max_packet_size=PACKET)
    a.exec_command(f"head -c {n} /dev/zero")
    b.exec_command("cat >/dev/null")
    t0 = time.perf_counter()
    while data := a.recv(1 << 20):
        b.sendall(data)
    b.shutdown_write()
    b.recv_exit_status()
    return time.perf_counter() - t0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=400)
    args = ap.parse_args()
    os.environ.setdefault("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.steps.images import direct_command, stream_image
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(LAB_INVENTORY)
    figures: dict[str, list[float]] = {"fabric side-load": [], "fabric raw": [], "relay side-load": [], "relay raw": []}
    with Fleet(inv, hosts=["head", "worker"]) as fleet:
        head, worker = fleet["head"], fleet["worker"]
        head.run(
            f"cd /tmp && head -c {args.mb}000000 /dev/urandom > blob && tar cf blob.tar blob && "
            f"docker import blob.tar {IMAGE} >/dev/null && rm -f blob blob.tar"
        ).check("build the benchmark image")
        n = int(head.run(f"docker save {IMAGE} | wc -c").check().stdout)
        try:
            for _ in range(args.runs):
                worker.run(f"docker rmi -f {IMAGE} >/dev/null 2>&1")
                figures["fabric side-load"].append(n / timed_on(head, direct_command(IMAGE, WORKER_FABRIC_IP)) / 1e6)
                ssh = f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes {WORKER_FABRIC_IP}"
                figures["fabric raw"].append(n / timed_on(head, f"head -c {n} /dev/zero | {ssh} 'cat >/dev/null'") / 1e6)
                worker.run(f"docker rmi -f {IMAGE} >/dev/null 2>&1")
                t0 = time.perf_counter()
                stream_image(head, worker, IMAGE)
                figures["relay side-load"].append(n / (time.perf_counter() - t0) / 1e6)
                figures["relay raw"].append(n / raw_relay(head, worker, n) / 1e6)
        finally:
            for s in (head, worker):
                s.run(f"docker rmi -f {IMAGE} >/dev/null 2>&1")
    med = {k: statistics.median(v) for k, v in figures.items()}
    print(f"image of {n / 1e6:.0f} MB (random bytes), {args.runs} runs, medians:")
    for k, v in figures.items():
        print(f"  {k:<17} {med[k]:7.1f} MB/s   runs {', '.join(f'{x:.1f}' for x in v)}")
    for path in ("fabric", "relay"):
        print(f"{path}: side-load / raw stream = {med[path + ' side-load'] / med[path + ' raw']:.2f}  (target >= 0.80)")


if __name__ == "__main__":
    main()
