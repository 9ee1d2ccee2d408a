#!/usr/bin/env python3
"""The weights copy to a node that has none, against the rail it travels: both measured in one run.

    python benchmarks/weights.py [--runs 3]

Per run, on the lab (`sparkctl lab up`; the cluster converged first):
- the rail's bound: iperf3 from the head to the worker's address on the first rail (one TCP
  stream, the checkpoint's size), and a raw stream of the same bytes through the head's own ssh
  with the options rsync uses (`head -c N /dev/zero | ssh <worker rail> 'cat >/dev/null'`);
- the copy: the worker's model folder removed by hand, then `sparkctl up`; the weights step's own
  figure for the transfer (rsync over the rail into staging) and the step's whole time on the
  worker (transfer, sha256 of every file, the rename, the record, the page cache dropped);
then three no-op `up`s with the weights in place (the 1.0 s budget). Prints a table and the ratio
copy / rail (target >= 0.80); asserts nothing. Holds the lab-test lock while it runs.

What the lab's rails can and cannot show: they are veth pairs shaped to 1 Gb/s (125 MB/s), so
the copy is bound by the rail, as it is on a Spark pair only when the link is the slowest part. A
ConnectX-7 rail carries 200 Gb/s (25 GB/s); there a single rsync over ssh is bound by the cipher
and one core (0.38-0.45 GB/s seen on Sparks: shared/reference/field-notes-wave4.md), so DeepSeek
V4 Flash's ~167 GB copies in ~6-7 min and the sha256 of it takes ~2 min more on a Grace core.
"""

from __future__ import annotations

import argparse
import json
import re
import statistics
import time

from labbench import INVENTORY, log, require_lab, sparkctl

MODEL = "/models/DeepSeek-V4.1-Flash-1017"


def host(name: str):
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.transport.ssh import HostSession

    inv = load_inventory(INVENTORY)
    return HostSession(inv.ssh_target(name)).connect(), inv


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--runs", type=int, default=3)
    args = ap.parse_args()
    _lock = require_lab()  # noqa: F841  (held until exit)
    from sparkctl.steps.weights import rail
    from sparkctl.transport.images import ssh_to

    rc, _ = sparkctl("up", "-i", str(INVENTORY))
    if rc:
        raise SystemExit("`sparkctl up` on the lab failed: fix the lab first")
    head, inv = host("head")
    worker, _ = host("worker")
    device, _, dst_ip, _ = rail(inv, "head", "worker")
    size = int(worker.run(f"du -sb --apparent-size {MODEL} | cut -f1").check("size").stdout)
    rows = []
    for i in range(args.runs):
        worker.run(["sh", "-c", f"iperf3 -s -1 -B {dst_ip} -D"]).check("iperf3 server")
        time.sleep(0.3)
        perf = json.loads(head.run(["iperf3", "-c", dst_ip, "-n", str(size), "-J"], timeout=300).check("iperf3").stdout)
        iperf = perf["end"]["sum_received"]["bits_per_second"] / 8
        t0 = time.monotonic()
        head.run(f"head -c {size} /dev/zero | {ssh_to(dst_ip)} 'cat >/dev/null'", timeout=300).check("raw ssh stream")
        raw_ssh = size / (time.monotonic() - t0)
        worker.run(["rm", "-rf", MODEL]).check("remove the worker's model")
        rc, doc = sparkctl("up", "-i", str(INVENTORY))
        step = doc["hosts"]["worker"]["weights"]
        m = re.search(r"copied \d+ file\(s\), [\d.]+ GB from head in ([\d.]+) s", step["message"])
        if rc or not m:
            raise SystemExit(f"the copy did not run as expected: {step}")
        copy = size / float(m.group(1))
        whole = size / step["seconds"]
        rows.append((iperf, raw_ssh, copy, whole))
        log(f"run {i + 1}: rail {iperf / 1e6:.0f} MB/s, ssh stream {raw_ssh / 1e6:.0f} MB/s, copy {copy / 1e6:.0f} MB/s, "
            f"step {whole / 1e6:.0f} MB/s")  # fmt: skip
    noop = []
    for _ in range(3):
        t0 = time.monotonic()
        sparkctl("up", "-i", str(INVENTORY))
        noop.append(time.monotonic() - t0)
    med = [statistics.median(col) for col in zip(*rows)]
    print(f"checkpoint: {size / 1e6:.0f} MB to the worker over {device} ({dst_ip}), {args.runs} run(s), medians:")
    print(f"  {'rail (iperf3, one stream)':32} {med[0] / 1e6:8.1f} MB/s")
    print(f"  {'raw stream through ssh':32} {med[1] / 1e6:8.1f} MB/s")
    print(f"  {'weights copy (rsync over ssh)':32} {med[2] / 1e6:8.1f} MB/s   {med[2] / med[0]:.2f} of the rail")
    print(f"  {'whole step (copy+verify+place)':32} {med[3] / 1e6:8.1f} MB/s   {med[3] / med[0]:.2f} of the rail")
    print(f"  no-op up with the weights in place: {', '.join(f'{t:.2f}' for t in noop)} s (wall, incl. the CLI's start)")
    print(f"  at the same share of a 200 Gb/s rail: capped by rsync over ssh (~0.45 GB/s), ~167 GB in "
          f"{167e9 / 0.45e9 / 60:.0f} min")  # fmt: skip


if __name__ == "__main__":
    main()
