#!/usr/bin/env python3
"""CPU the simulated runtime spends per generated token at the lab's pace (SIM_TIME_SCALE 0.01:
a decode step models ~30 ms, ~0.3 ms here). No lab needed.

    python benchmarks/sim_decode_cpu.py [--seconds 8]

Starts one `vllm serve` of the lab's target model on loopback (single node, MTP speculative
decoding, max_num_seqs 8), then for each load (1 client, 4 clients, 1 streaming client; back to
back, 300 tokens each, ignore_eos) reads the server's CPU (/proc/PID/stat utime+stime) over
--seconds. Prints tokens/s, CPU seconds per 1000 tokens and cores; asserts nothing (timings are
not tests). The lab's tests spend most of the simulator's CPU in these decode steps.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "lab"))
from sparkctl_lab.sim import harness  # noqa: E402

TICK = os.sysconf("SC_CLK_TCK")
NAME = "deepseek-v4.1-flash"


def cpu_seconds(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICK


def load(base: str, clients: int, stream: bool, seconds: float) -> int:
    """Back-to-back requests from `clients` threads for `seconds`; the tokens generated."""
    body = {"model": NAME, "prompt": "Write a python function that merges two sorted lists.", "max_tokens": 300,
            "ignore_eos": True, "temperature": 0, "stream": stream}  # fmt: skip
    tokens, lock, end = [0], threading.Lock(), time.monotonic() + seconds

    def client() -> None:
        with httpx.Client(base_url=base, timeout=60, trust_env=False) as c:
            while time.monotonic() < end:
                if stream:
                    with c.stream("POST", "/v1/completions", json=body) as r:
                        for _ in r.iter_lines():
                            pass
                    n = body["max_tokens"]
                else:
                    n = c.post("/v1/completions", json=body).json()["usage"]["completion_tokens"]
                with lock:
                    tokens[0] += n

    threads = [threading.Thread(target=client) for _ in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return tokens[0]


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=8.0)
    a = ap.parse_args()
    tmp = tempfile.mkdtemp(prefix="sim-decode-")
    port = harness.free_port()
    env = harness.sim_env(tmp, SIM_TIME_SCALE="0.01", SIM_CRASH_CONTEXT_TOKENS="0", VLLM_CACHE_ROOT=os.path.join(tmp, "cache"))
    # fmt: off
    argv = harness.module_argv(
        "vllm_cli", "serve", harness.LAB_MODEL, "--served-model-name", NAME, "--host", "127.0.0.1", "--port", str(port),
        "--max-model-len", "65536", "--max-num-seqs", "8", "--max-num-batched-tokens", "8192", "--block-size", "256",
        "--kv-cache-dtype", "fp8_ds_mla", "--moe-backend", "flashinfer_b12x",
        "--speculative-config", json.dumps({"method": "mtp", "num_speculative_tokens": 5}),
    )
    # fmt: on
    server = harness.Proc("vllm", argv, env, os.path.join(tmp, "vllm.log")).start()
    try:
        base = f"http://127.0.0.1:{port}"
        assert harness.wait_http(f"{base}/health", timeout=120, proc=server), server.log()[-2000:]
        load(base, 1, False, 1.0)  # warm: first requests compile nothing, but import and allocate
        print(f"the simulator's decode CPU at SIM_TIME_SCALE 0.01, {a.seconds:g} s per load:")
        for clients, stream in ((1, False), (4, False), (1, True)):
            c0, t0 = cpu_seconds(server.pid), time.monotonic()
            tokens = load(base, clients, stream, a.seconds)
            used, wall = cpu_seconds(server.pid) - c0, time.monotonic() - t0
            what = f"{clients} client{'s' if clients > 1 else ''}{', streaming' if stream else ''}"
            print(f"  {what:<22} {tokens / wall:7.0f} tokens/s   {1000 * used / max(tokens, 1):6.3f} CPU-s per 1000 tokens"
                  f"   {used / wall:4.2f} cores")  # fmt: skip
    finally:
        server.stop(5)
    return 0


if __name__ == "__main__":
    sys.exit(main())
