#!/usr/bin/env python3
"""CPU the simulated runtime spends per generated token at the lab's pace (SIM_TIME_SCALE 0.01:
a decode step models ~30 ms, ~0.3 ms here). No lab needed.

    python benchmarks/sim_decode_cpu.py [--seconds 8]

Starts one `vllm serve` of the lab's target model on loopback (the unit tests' runner,
tests/unit/test_sim_serving.py Server: single node, MTP speculative decoding; max_num_seqs 8), then for each load (1 client, 4 clients, 1 streaming client; back to
back, 300 tokens each, ignore_eos) reads the server's CPU (/proc/PID/stat utime+stime) over
--seconds. Prints tokens/s, CPU seconds per 1000 tokens and cores; asserts nothing (timings are
not tests). The lab's tests spend most of the simulator's CPU in these decode steps.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit"))  # the tests' simulator runner: one copy of it
from sim_idle_cpu import cpu_seconds  # noqa: E402  (benchmarks/ is on the path: the script's folder)
from test_sim_serving import NAME, Server  # noqa: E402


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
    # the tests' `vllm serve` (single node, MTP k=5) at the lab's pace, 8 at once
    server = Server(tempfile.mkdtemp(prefix="sim-decode-"), "--max-num-seqs", "8",
                    env={"SIM_TIME_SCALE": "0.01", "SIM_STEP_TIME_SCALE": "0.01", "SIM_CRASH_CONTEXT_TOKENS": "0"})  # fmt: skip
    try:
        base = server.base
        load(base, 1, False, 1.0)  # warm: first requests compile nothing, but import and allocate
        print(f"the simulator's decode CPU at SIM_TIME_SCALE 0.01, {a.seconds:g} s per load:")
        for clients, stream in ((1, False), (4, False), (1, True)):
            c0, t0 = cpu_seconds(server.proc.pid), time.monotonic()
            tokens = load(base, clients, stream, a.seconds)
            used, wall = cpu_seconds(server.proc.pid) - c0, time.monotonic() - t0
            what = f"{clients} client{'s' if clients > 1 else ''}{', streaming' if stream else ''}"
            print(f"  {what:<22} {tokens / wall:7.0f} tokens/s   {1000 * used / max(tokens, 1):6.3f} CPU-s per 1000 tokens"
                  f"   {used / wall:4.2f} cores")  # fmt: skip
    finally:
        server.stop()
    return 0


if __name__ == "__main__":
    sys.exit(main())
