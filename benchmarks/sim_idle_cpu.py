#!/usr/bin/env python3
"""CPU an idle simulated cluster burns: the lab's runtime shape on loopback, no lab needed.

    python benchmarks/sim_idle_cpu.py [--seconds 20]

Starts what a lab `sparkctl up` starts, as local processes (lab/sparkctl_lab/sim/harness.py): the
remote drafter (`vllm serve` of the drafter), a Ray head and a Ray worker, and the target `vllm
serve` (ray backend, TP 2, the drafter by SPLICE_DRAFTER_URL). Once the target serves it waits
2 s, then reads each process's CPU time (/proc/PID/stat utime+stime) over --seconds of no traffic.
Prints percent of one core per process and the total; asserts nothing (timings are not tests).
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from sparkctl_lab.sim import harness  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")


def cpu_seconds(pid: int) -> float:
    """utime + stime of the process and of its threads (they are one /proc/PID/stat)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def tree(pid: int) -> list[int]:
    """pid and every descendant (a daemonized Ray head is a child of the target)."""
    out, todo = [], [pid]
    while todo:
        p = todo.pop()
        out.append(p)
        try:
            kids = Path(f"/proc/{p}/task/{p}/children").read_text().split()
        except OSError:
            kids = []
        todo.extend(int(k) for k in kids)
    return out


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=20.0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sim-idle-")
    env = harness.sim_env(
        tmp,
        SIM_TIME_SCALE="0.002",
        SIM_STEP_TIME_SCALE="0.005",
        VLLM_LOG_STATS_INTERVAL="2",
        VLLM_CACHE_ROOT=os.path.join(tmp, "cache"),
    )
    gcs, dport, tport = harness.free_port(), harness.free_port(), harness.free_port()
    procs: list[harness.Proc] = []

    def start(name: str, argv: list[str], extra: dict | None = None) -> harness.Proc:
        e = {**env, **(extra or {})}
        if name == "ray-worker":
            e["RAY_TMPDIR"] = os.path.join(tmp, "worker-raytmp")
            os.makedirs(e["RAY_TMPDIR"], exist_ok=True)
        p = harness.Proc(name, argv, e, os.path.join(tmp, f"{name}.log")).start()
        procs.append(p)
        return p

    try:
        drafter = start(
            "drafter",
            harness.module_argv(
                "vllm_cli",
                "serve",
                "/models/drafter",
                "--served-model-name",
                "drafter",
                "--host",
                "127.0.0.1",
                "--port",
                str(dport),
                "--tensor-parallel-size",
                "2",
            ),
            {"SIM_GPU_COUNT": "2"},
        )  # the offload host's two GPUs
        assert harness.wait_http(f"http://127.0.0.1:{dport}/health", timeout=60, proc=drafter), drafter.log()[-2000:]
        head = subprocess.run(
            harness.module_argv("ray_cli", "start", "--head", "--node-ip-address=127.0.0.1", f"--port={gcs}"),
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert head.returncode == 0, head.stdout + head.stderr
        worker = start("ray-worker", harness.module_argv("ray_cli", "start", f"--address=127.0.0.1:{gcs}", "--block"))
        assert worker.wait_log("Ray runtime started.", 20), worker.log()
        target = start(
            "target",
            harness.target_argv(tport),
            {"SPLICE_DRAFTER_URL": f"http://127.0.0.1:{dport}"},
        )
        assert harness.wait_http(f"http://127.0.0.1:{tport}/health", timeout=120, proc=target), target.log()[-2000:]
        time.sleep(2.0)
        ray_head = int(Path(tmp, "raytmp").glob("ray/sim_head_*.pid").__next__().read_text())
        watched = {
            "drafter": [drafter.pid],
            "ray head (GCS)": [ray_head],
            "ray worker": [worker.pid],
            "target (vllm serve)": [target.pid],
        }
        before = {n: sum(cpu_seconds(p) for p in pids) for n, pids in watched.items()}
        t0 = time.monotonic()
        time.sleep(a.seconds)
        took = time.monotonic() - t0
        total = 0.0
        print(f"idle CPU over {took:.1f} s, percent of one core (SIM_TIME_SCALE 0.002, VLLM_LOG_STATS_INTERVAL 2):")
        for n, pids in watched.items():
            pct = 100 * (sum(cpu_seconds(p) for p in pids) - before[n]) / took
            total += pct
            print(f"  {n:<22} {pct:5.1f} %")
        print(f"  {'total':<22} {total:5.1f} %")
    finally:
        for p in reversed(procs):
            p.stop(5)
        subprocess.run(harness.module_argv("ray_cli", "stop", "--force"), env=env, capture_output=True, timeout=60)
    return 0


if __name__ == "__main__":
    sys.exit(main())
