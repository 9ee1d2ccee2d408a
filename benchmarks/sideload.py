#!/usr/bin/env python3
"""Image side-load throughput against a raw SSH stream over the same path (head -> this machine -> worker).

    python benchmarks/sideload.py [--runs 3]

Raw: OpenSSH `ssh head 'head -c N /dev/zero' | ssh worker 'cat >/dev/null'` with N = the image's
size. Side-load: sparkctl's `stream_image` (docker save on head piped into docker load on the
worker over the run's own SSH connections). Prints MB/s for both and the ratio (target >= 0.80).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

LAB_DIR = Path("/var/lib/sparkctl-lab")
SSH = ["ssh", "-F", str(LAB_DIR / "ssh" / "config")]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    os.environ.setdefault("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.steps.images import stream_image
    from sparkctl.transport.ssh import Fleet

    inv = load_inventory(LAB_DIR / "inventory.yaml")
    image = inv.runtime.image
    size = int(subprocess.run([*SSH, "head", f"docker save {image} | wc -c"], capture_output=True, text=True, check=True).stdout)
    raw, side = [], []
    with Fleet(inv, hosts=["head", "worker"]) as fleet:
        fleet.map(lambda s: s.connect())
        for _ in range(args.runs):
            t0 = time.perf_counter()
            src = subprocess.Popen([*SSH, "head", f"head -c {size} /dev/zero"], stdout=subprocess.PIPE)
            subprocess.run([*SSH, "worker", "cat >/dev/null"], stdin=src.stdout, check=True)
            src.wait()
            raw.append(size / (time.perf_counter() - t0) / 1e6)
            t0 = time.perf_counter()
            moved = stream_image(fleet["head"], fleet["worker"], image)
            side.append(moved / (time.perf_counter() - t0) / 1e6)
    r, s = statistics.median(raw), statistics.median(side)
    print(f"image {image}: {size / 1e6:.1f} MB")
    print(f"raw SSH stream (OpenSSH, head -> runner -> worker): median {r:.1f} MB/s  runs {', '.join(f'{x:.1f}' for x in raw)}")
    print(f"side-load (docker save | docker load over sparkctl's SSH): median {s:.1f} MB/s  runs {', '.join(f'{x:.1f}' for x in side)}")
    print(f"side-load / raw: {s / r:.2f}  (target >= 0.80)")


if __name__ == "__main__":
    sys.exit(main())
