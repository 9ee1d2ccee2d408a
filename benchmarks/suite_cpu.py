"""Where the machine's CPU goes while a command runs (issue 25: the suite on two labs is CPU-bound).

    python benchmarks/suite_cpu.py [--interval S] -- ./dev.sh test

Samples every process in /proc each interval (utime + stime, counted from when the command
started: a process already running then counts only what it used since), keyed by pid and start time, labels
it by what it is (a lab pytest, sparkctl's own run by verb, the simulator's engine or Ray, a
gateway, iperf3, dockerd, ...), and when the command ends prints CPU-seconds per label, the
machine's busy share (of all cores, /proc/stat) and the command's exit code. A process that lives
less than one interval is missed: `accton` + `sa -a -c` (Debian's acct) count those by name.
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import time

TICK = os.sysconf("SC_CLK_TCK")
KINDS = (  # (what the command line holds, its label), first match wins
    ("sparkctl_lab.sim.vllm_cli", "simulator engine"),
    ("sparkctl_lab.sim.ray_cli", "simulator Ray"),
    ("sparkctl_lab.hostinit", "lab host init"),
    ("sparkctl_lab.hw", "simulated tools"),
    ("sparkctl.gateway", "gateway"),
    ("vllm::router", "fleet door (vllm-router)"),  # its process title (setproctitle)
    ("prometheus-node-exporter", "node exporter"),
    ("prometheus", "prometheus"),
    ("docker-registry", "registry"),
    ("containerd-shim", "containerd-shim"),
    ("dockerd", "dockerd"),
    ("containerd", "containerd"),
    ("iperf3", "iperf3"),
)


def label(pid: str) -> str | None:
    try:
        argv = [a.decode(errors="replace") for a in open(f"/proc/{pid}/cmdline", "rb").read().split(b"\0") if a]
    except OSError:
        return None
    if not argv:
        return "kernel threads"
    line = " ".join(argv)
    if "pytest" in line:
        return "pytest unit" if "tests/unit" in line else "pytest lab"
    if "-m sparkctl " in line + " ":
        verb = argv[argv.index("sparkctl") + 1] if "sparkctl" in argv[:-1] else ""
        return f"sparkctl {verb}".strip()
    for needle, name in KINDS:
        if needle in line:
            return name
    return os.path.basename(argv[0])[:24]


def busy() -> tuple[int, int]:
    f = [int(x) for x in open("/proc/stat").readline().split()[1:]]
    return sum(f) - f[3] - f[4], sum(f)  # (not idle nor iowait, all)


def main() -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--interval", type=float, default=1.0, help="seconds between samples (default 1)")
    p.add_argument("command", nargs=argparse.REMAINDER, help="-- COMMAND ...")
    a = p.parse_args()
    cmd = a.command[1:] if a.command[:1] == ["--"] else a.command
    if not cmd:
        p.error("give the command to watch after --")
    seen: dict[tuple[str, str], list] = {}  # (pid, start time) -> [label, ticks at first sight, ticks now]

    def sample(before: bool) -> None:
        for pid in filter(str.isdigit, os.listdir("/proc")):
            try:
                stat = open(f"/proc/{pid}/stat").read()
            except OSError:
                continue
            f = stat[stat.rfind(")") + 2 :].split()
            key, ticks = (pid, f[19]), int(f[11]) + int(f[12])
            if key in seen:
                seen[key][2] = ticks
            elif (name := label(pid)) is not None:  # one born since counts from 0
                seen[key] = [name, ticks if before else 0, ticks]

    sample(before=True)
    b0, t0 = busy()
    w0 = time.monotonic()
    child = subprocess.Popen(cmd)
    while child.poll() is None:
        time.sleep(a.interval)
        sample(before=False)
    b1, t1 = busy()
    per: dict[str, list] = {}
    for name, first, last in seen.values():
        if last > first:
            row = per.setdefault(name, [0, 0.0])
            row[0] += 1
            row[1] += (last - first) / TICK
    print(f"{'CPU-s':>8} {'procs':>6}  what")
    for name, (n, cpu) in sorted(per.items(), key=lambda kv: -kv[1][1]):
        if cpu >= 0.5:
            print(f"{cpu:8.1f} {n:6d}  {name}")
    total = sum(cpu for _, cpu in per.values())
    print(f"{total:8.1f}         sampled in all; wall {time.monotonic() - w0:.0f} s, machine busy "
          f"{100 * (b1 - b0) / max(1, t1 - t0):.0f} % of {os.cpu_count()} cores; exit {child.returncode}")  # fmt: skip
    return child.returncode


if __name__ == "__main__":
    sys.exit(main())
