#!/usr/bin/env python3
"""Image side-load throughput against a raw SSH stream on the same link, both paths sparkctl uses.

    python benchmarks/sideload.py [--runs 3] [--mb 400] [--layers 4]

Builds a throwaway image of --mb random (incompressible) bytes in --layers equal layers on the
lab's head (and the same image minus its top layer), then per run and per path of
`sparkctl.transport.images.copy_image` (fabric: the head streams to the worker's rail address
with its own ssh; relay: through this machine over sparkctl's two SSH connections):
- fresh node: the worker holds none of the layers;
- all but the top layer: the worker holds the base image, only the top layer has to move;
against the raw stream on the same link carrying the same bytes (fabric: `head -c N /dev/zero |
ssh <same options> <worker rail> 'cat >/dev/null'` on the head; relay: N zero bytes through the
same two SSH connections), and dockerd's own limits on the same image: `docker save` alone on the
head and `docker load` alone (from a local file) on the worker. While the fresh fabric copy runs,
CPU is sampled per process name from /proc (the lab's hosts share this machine's CPUs).
Prints a table and the ratios (target >= 0.80 fresh); asserts nothing. Removes the images.
Holds the lab-test lock while it runs, so it never measures beside a test session.
"""

from __future__ import annotations

import argparse
import os
import statistics
import threading
import time
from collections import Counter, defaultdict
from pathlib import Path

from labbench import INVENTORY, require_lab

NAME = "sparkctl-bench/layers"
WORKER_FABRIC_IP = "10.231.100.3"
SAVE_FILE = "/tmp/sparkctl-bench-save.tar"  # the lab's hosts share this machine's /tmp


def timed_on(session, command: str) -> float:
    """Seconds the command takes on the host itself (its own clock: no SSH round trip counted)."""
    r = session.run(["bash", "-o", "pipefail", "-c", f"t0=$(date +%s.%N); {command}; t1=$(date +%s.%N); echo $t0 $t1"])
    r.check(command[:60])
    t0, t1 = map(float, r.stdout.split()[-2:])
    return t1 - t0


def raw_relay(src, dst, n: int) -> float:
    from sparkctl.transport.images import PACKET, WINDOW

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


class CpuSampler:
    """CPU seconds per process name over a window, sampled from /proc every 0.2 s (short-lived
    processes such as ssh and the docker CLI are counted up to their last sample)."""

    def __init__(self) -> None:
        self.tick = os.sysconf("SC_CLK_TCK")
        self.first: dict[int, tuple[str, int]] = {}
        self.last: dict[int, tuple[str, int]] = {}
        self.stop = threading.Event()

    @staticmethod
    def _busy() -> tuple[int, int]:
        v = list(map(int, Path("/proc/stat").read_text().split("\n", 1)[0].split()[1:]))
        idle = v[3] + v[4]
        return sum(v) - idle, sum(v)

    def _snapshot(self) -> dict[int, tuple[str, int]]:
        out = {}
        for p in Path("/proc").iterdir():
            if not p.name.isdigit():
                continue
            try:
                s = (p / "stat").read_text()
            except OSError:
                continue
            comm = s[s.index("(") + 1 : s.rindex(")")]
            f = s[s.rindex(")") + 2 :].split()
            out[int(p.name)] = (comm, int(f[11]) + int(f[12]))
        return out

    def __enter__(self) -> "CpuSampler":
        self.first = self._snapshot()
        self.busy0 = self._busy()
        self.t0 = time.monotonic()

        def loop() -> None:
            while not self.stop.wait(0.2):
                self.last.update(self._snapshot())

        self.thread = threading.Thread(target=loop, daemon=True)
        self.thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self.stop.set()
        self.thread.join()
        self.last.update(self._snapshot())
        self.seconds = time.monotonic() - self.t0
        b1 = self._busy()
        self.machine = (b1[0] - self.busy0[0]) / max(1, b1[1] - self.busy0[1])  # share of all CPUs busy

    def by_name(self) -> dict[str, float]:
        out: Counter[str] = Counter()
        for pid, (comm, ticks) in self.last.items():
            first = self.first.get(pid)
            before = first[1] if first and first[0] == comm else 0  # a reused pid is another process
            if ticks > before:
                out[comm] += (ticks - before) / self.tick
        return dict(out.most_common())


def build(head, mb: int, layers: int) -> None:
    per = mb * 10**6 // layers
    script = f"""set -e; d=$(mktemp -d); cd $d
for i in $(seq 1 {layers}); do head -c {per} /dev/urandom > b$i; done
{{ echo FROM scratch; for i in $(seq 1 {layers - 1}); do echo "COPY b$i /b$i"; done; }} > Dockerfile.base
printf 'FROM {NAME}:base\\nCOPY b{layers} /b{layers}\\n' > Dockerfile
DOCKER_BUILDKIT=0 docker build -q -f Dockerfile.base -t {NAME}:base . >/dev/null 2>&1
DOCKER_BUILDKIT=0 docker build -q -t {NAME}:full . >/dev/null 2>&1
cd /; rm -rf $d"""
    head.run(["sh", "-c", script], timeout=600).check("build the benchmark images")


def clean(session) -> None:
    session.run(f"docker rmi -f {NAME}:base {NAME}:full >/dev/null 2>&1; docker image prune -f >/dev/null 2>&1")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=3)
    ap.add_argument("--mb", type=int, default=400)
    ap.add_argument("--layers", type=int, default=4)
    args = ap.parse_args()
    os.environ.setdefault("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.transport.images import copy_image, ssh_to, stored_image
    from sparkctl.transport.ssh import Fleet

    lock = require_lab()  # noqa: F841 (held until exit)
    inv = load_inventory(INVENTORY)
    fig: dict[str, list[float]] = defaultdict(list)
    cpu: list[CpuSampler] = []
    with Fleet(inv, hosts=["head", "worker"]) as fleet:
        head, worker = fleet["head"], fleet["worker"]
        for s in (head, worker):
            clean(s)
        build(head, args.mb, args.layers)
        full, base = stored_image(head, f"{NAME}:full"), stored_image(head, f"{NAME}:base")
        n = int(head.run(f"docker save {full.id} | wc -c").check().stdout)
        top = n - int(head.run(f"docker save {base.id} | wc -c").check().stdout)
        try:
            for _ in range(args.runs):
                fig["save alone"].append(n / timed_on(head, f"docker save {full.id} > /dev/null"))
                head.run(f"docker save {full.id} > {SAVE_FILE}").check()
                clean(worker)
                fig["load alone"].append(n / timed_on(worker, f"docker load -i {SAVE_FILE} >/dev/null"))
                head.run(f"rm -f {SAVE_FILE}")
                for key, ssh in (
                    ("fabric raw", ssh_to(WORKER_FABRIC_IP)),
                    ("fabric raw default cipher", f"ssh -o BatchMode=yes {WORKER_FABRIC_IP}"),
                ):
                    fig[key].append(n / timed_on(head, f"head -c {n} /dev/zero | {ssh} 'cat >/dev/null'"))
                fig["relay raw"].append(n / raw_relay(head, worker, n))
                for path, addr in (("fabric", WORKER_FABRIC_IP), ("relay", None)):
                    clean(worker)
                    with CpuSampler() as sampler:
                        t = copy_image(head, worker, full.id, f"{NAME}:full", fabric_address=addr)
                    assert t.path == path, t.why
                    if path == "fabric":
                        cpu.append(sampler)
                    fig[f"{path} fresh"].append(n / t.seconds)
                    fig[f"{path} fresh stream only"].append(n / t.stream_seconds)
                    fig[f"{path} fresh moved"].append(t.bytes_sent)
                    clean(worker)
                    copy_image(head, worker, base.id, f"{NAME}:base", fabric_address=addr)
                    t = copy_image(head, worker, full.id, f"{NAME}:full", fabric_address=addr)
                    fig[f"{path} top"].append(n / t.seconds)  # the whole image in place per second
                    fig[f"{path} top s"].append(t.seconds)
                    fig[f"{path} top moved"].append(t.bytes_sent)
        finally:
            for s in (head, worker):
                clean(s)
            head.run(f"rm -f {SAVE_FILE}")
    med = {k: statistics.median(v) for k, v in fig.items()}
    mb = lambda x: f"{x / 1e6:7.1f}"  # noqa: E731
    print(
        f"image: {args.layers} layers, {n / 1e6:.0f} MB as `docker save` (top layer {top / 1e6:.0f} MB), random bytes; "
        f"{args.runs} runs, medians (runs in brackets)"
    )
    runs = lambda k: "[" + ", ".join(f"{x / 1e6:.0f}" for x in fig[k]) + "]"  # noqa: E731
    print(
        f"\n{'path':<7} {'raw stream':>11} | {'fresh node: MB/s':>17} {'/ raw':>6} {'MB moved':>9} | "
        f"{'all but top: s':>15} {'MB moved':>9} {'image MB/s':>11} {'/ raw':>6}"
    )
    for p in ("fabric", "relay"):
        raw = med[f"{p} raw"]
        print(
            f"{p:<7} {mb(raw)} MB/s | {mb(med[f'{p} fresh'])} MB/s {med[f'{p} fresh'] / raw:6.2f} "
            f"{mb(med[f'{p} fresh moved'])}   | {med[f'{p} top s']:13.1f} s {mb(med[f'{p} top moved'])} "
            f"{mb(med[f'{p} top'])}     {med[f'{p} top'] / raw:6.2f}"
        )
    for k in (
        "fabric raw",
        "fabric raw default cipher",
        "relay raw",
        "fabric fresh",
        "fabric fresh stream only",
        "relay fresh",
        "relay fresh stream only",
        "save alone",
        "load alone",
    ):
        print(f"  {k:<26} {mb(med[k])} MB/s  {runs(k)}")
    s, l = med["save alone"], med["load alone"]
    bound = 1 / (1 / s + 1 / l)
    print(
        f"\ndockerd on the same image: save alone {s / 1e6:.0f} MB/s (head), load alone {l / 1e6:.0f} MB/s (worker, "
        f"local file, no network) = {l / med['fabric raw']:.2f} of the raw fabric stream."
    )
    print(
        f"20.10's save spools the whole image to a temp dir before sending and load spools it before registering, "
        f"so they run one after the other: 1/(1/save + 1/load) = {bound / 1e6:.0f} MB/s; "
        f"measured fabric fresh {med['fabric fresh'] / 1e6:.0f} MB/s = {med['fabric fresh'] / bound:.2f} of that bound."
    )
    c = cpu[len(cpu) // 2]
    names = c.by_name()
    total = sum(names.values())
    top_names = ", ".join(f"{k} {v:.1f}" for k, v in list(names.items())[:7])
    print(
        f"CPU during a fresh fabric copy ({c.seconds:.1f} s, {os.cpu_count()} CPUs): machine busy {c.machine:.0%}; "
        f"CPU seconds by process: {top_names} (total {total:.1f})"
    )
    for p in ("fabric", "relay"):
        print(f"{p}: fresh side-load / raw stream = {med[p + ' fresh'] / med[p + ' raw']:.2f}  (target >= 0.80)")


if __name__ == "__main__":
    main()
