"""What the front door costs: TTFT and tok/s at 4 streams through the gateway vs straight to the engine.

    python benchmarks/gateway.py [--rounds 4] [--requests 6] [--streams 4] [--max-tokens 200] [--step-scale 0.1]
    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/gateway.py --lab \
        [--rounds 2] [--requests 4] [--streams 4] [--max-tokens 200] [--load-streams 3]

--lab: the same TTFT and tok/s on the lab's cluster, converged with a key at its front door
(gateway.api_keys_file, a file on the head; every request sends it), its gateway on runtime.port vs its engine
through the gateway's never-held engine route: the engine listens on the head's loopback), then a
warm and a cold `sparkctl reload` under load: --load-streams OpenAI-client threads (max_retries=0,
streaming, back to back) through the gateway and as many at the engine route (never held), all through the
same reload, from 1 s before it to 1 s after. Printed for each side: requests, failed requests (by
what the client saw) and the longest request, beside the reload's downtime; and whether sparkctl
held the gateway for the reload (the reload handshake) or the gateway held on its own when the
engine went away (its upstream-down hold). The lab ends on its own inventory. Holds the lab test
lock for the whole run (benchmarks/labbench.py).

The engine is the lab's vLLM simulator on loopback (tests/unit/test_sim_serving.Server), the
gateway `python -m sparkctl.gateway` in front of it (tests/unit/test_gateway.Gateway), asking a
key of every request (--api-keys-file) with its default bounds, as sparkctl runs it. Rounds
alternate direct / through the gateway (drift hits both); each round runs `--streams` client
threads, each streaming `--requests` chat completions one after the other. TTFT is the time to the
first content token; tok/s is the round's completion tokens (the engine's usage) over its wall time.
--step-scale sets the simulator's step time (1.0 = the seeds' hardware; 0.1 = ten times faster, so a
round takes seconds; the faster the engine, the larger the gateway's share). Also printed: how soon
a request is answered 503 when the expected hold exceeds hold_s (the issue: within 100 ms).
The issue's budget: +2 ms median TTFT, tok/s within 3%. Loopback only; needs no root and no lab.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
BENCH_KEY = "bench-key-made-up-for-this-run"
sys.path.insert(0, str(REPO / "tests" / "unit"))  # the tests' simulator and gateway runners: one copy of each


def one_round(
    base: str, name: str, streams: int, requests: int, max_tokens: int, headers: dict | None = None
) -> tuple[list[float], float]:
    """(TTFT of every request in seconds, aggregate completion tok/s) of one round."""
    import httpx

    ttfts: list[float] = []
    tokens = [0]
    lock = threading.Lock()

    def client(i: int) -> None:
        with httpx.Client(base_url=base, timeout=120, headers=headers or {}) as c:
            for j in range(requests):
                body = {
                    "model": name,
                    "stream": True,
                    "max_tokens": max_tokens,
                    "temperature": 0,
                    "ignore_eos": True,
                    "stream_options": {"include_usage": True},
                    "messages": [{"role": "user", "content": f"Tell me about the river ({i}, {j})."}],
                }
                t0 = time.perf_counter()
                first = None
                used = 0
                with c.stream("POST", "/v1/chat/completions", json=body) as r:
                    r.raise_for_status()
                    for line in r.iter_lines():
                        if not line.startswith("data: {"):
                            continue
                        ev = json.loads(line[6:])
                        if first is None and any((ch.get("delta") or {}).get("content") for ch in ev["choices"]):
                            first = time.perf_counter() - t0
                        if ev.get("usage"):
                            used = ev["usage"]["completion_tokens"]
                with lock:
                    ttfts.append(first if first is not None else float("nan"))
                    tokens[0] += used

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return ttfts, tokens[0] / (time.perf_counter() - t)


def reject_latency(gw, n: int = 50) -> list[float]:
    """Seconds to a 503 while a hold longer than hold_s is expected."""
    gw.hold(reason="benchmark", expected_s=3600)
    out = []
    try:
        for _ in range(n):
            t = time.perf_counter()
            r = gw.client.post("/v1/completions", json={"prompt": "x", "max_tokens": 1})
            out.append(time.perf_counter() - t)
            assert r.status_code == 503 and r.headers["retry-after"], r.text
    finally:
        gw.release()
    return out


class Load:
    """OpenAI-client threads (max_retries=0) streaming chat completions at `base` back to back until stopped:
    every request's outcome ("ok", or what failed: "503", "connection", "empty", ...) and duration."""

    def __init__(self, base: str, name: str, threads: int, max_tokens: int = 12, api_key: str = "bench"):
        self.base, self.name, self.max_tokens, self.api_key = base, name, max_tokens, api_key
        self.results: list[tuple[str, float]] = []
        self._stop = threading.Event()
        self._threads = [threading.Thread(target=self._run, daemon=True) for _ in range(threads)]

    def start(self) -> "Load":
        for t in self._threads:
            t.start()
        return self

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(180)

    def _run(self) -> None:
        import openai

        client = openai.OpenAI(base_url=f"{self.base}/v1", api_key=self.api_key, max_retries=0, timeout=120)
        while not self._stop.is_set():
            t0 = time.perf_counter()
            try:
                chunks = client.chat.completions.create(
                    model=self.name, messages=[{"role": "user", "content": "Count from 1 to 10."}],
                    max_tokens=self.max_tokens, temperature=0, stream=True,
                )  # fmt: skip
                outcome = "ok" if "".join(c.choices[0].delta.content or "" for c in chunks if c.choices) else "empty"
            except openai.APIStatusError as e:  # the gateway's own answers carry Retry-After; the engine's drain 503 none
                outcome = f"{e.status_code}{' Retry-After' if e.response.headers.get('retry-after') else ''}"
            except openai.APIConnectionError as e:
                outcome = "connection" if "refused" not in repr(e.__cause__).lower() else "connection refused"
            except Exception as e:  # noqa: BLE001 - any other failure is a failed request too
                outcome = type(e).__name__
            self.results.append((outcome, time.perf_counter() - t0))

    def summary(self) -> dict:
        failed: dict[str, int] = {}
        for outcome, _ in self.results:
            if outcome != "ok":
                failed[outcome] = failed.get(outcome, 0) + 1
        return {
            "requests": len(self.results),
            "failed": sum(failed.values()),
            "failed_by_kind": failed,
            "longest_s": round(max((s for _, s in self.results), default=0.0), 2),
        }


def lab_main(args) -> int:
    """The lab's front door: TTFT and tok/s through it vs direct, then a warm and a cold reload under load."""
    import random

    import yaml

    from labbench import INVENTORY, log, require_lab, sparkctl

    lock = require_lab()  # noqa: F841 (held until exit)
    from sparkctl_lab.hostexec import host_exec

    # the front door as issue 39 has it: a key asked of every request (a file on the head), default bounds
    workdir = Path(tempfile.mkdtemp(prefix="bench-gateway-lab-"))
    keys_dir = "/etc/sparkctl-bench"
    host_exec("head", ["sh", "-c", f"umask 077 && mkdir -p {keys_dir} && echo {BENCH_KEY} > {keys_dir}/api-keys"], check=True)
    keyed_doc = yaml.safe_load(INVENTORY.read_text())
    keyed_doc.setdefault("gateway", {})["api_keys_file"] = f"{keys_dir}/api-keys"
    keyed = workdir / "keyed.yaml"
    keyed.write_text(yaml.safe_dump(keyed_doc, sort_keys=False))
    with_key = {"Authorization": f"Bearer {BENCH_KEY}"}
    doc = yaml.safe_load(INVENTORY.read_text())
    gateway = doc.get("gateway") or {}
    if gateway.get("enabled") is False:
        sys.exit(f"{INVENTORY} has gateway.enabled: false: there is no front door to measure")
    head = next(h for h in doc["hosts"].values() if h["role"] == "head")["ssh"]["address"]
    public = f"http://{head}:{doc['runtime']['port']}"
    # the engine itself, never held: behind the gateway it listens on the head's loopback only, so from
    # here through the gateway's engine route (the hop is then in both figures: the loopback run
    # measures the gateway against the bare engine)
    engine = f"{public}/gateway/engine"
    name = doc["runtime"]["served_model_name"]
    log("converging the lab on its own inventory with a key at its front door (sparkctl up) ...")
    rc, up = sparkctl("up", "-i", str(keyed))
    if rc != 0:
        sys.exit(f"sparkctl up failed: {json.dumps(up)[-2000:]}")

    figures: dict[str, dict[str, list]] = {"direct": {"ttft": [], "tps": []}, "gateway": {"ttft": [], "tps": []}}
    one_round(public, name, args.streams, 1, 20, with_key)  # warm-up
    one_round(engine, name, args.streams, 1, 20, with_key)
    for k in range(args.rounds):
        for label, base in (("direct", engine), ("gateway", public))[:: 1 if k % 2 == 0 else -1]:
            ttfts, tps = one_round(base, name, args.streams, args.requests, args.max_tokens, with_key)
            figures[label]["ttft"] += ttfts
            figures[label]["tps"].append(tps)
            log(f"round {k + 1} {label:7s}: median TTFT {statistics.median(ttfts) * 1000:7.2f} ms, {tps:8.1f} tok/s")

    def variant(label: str, **runtime) -> Path:
        new = yaml.safe_load(keyed.read_text())
        new["runtime"].update(runtime)
        out = workdir / f"{label}.yaml"
        out.write_text(yaml.safe_dump(new, sort_keys=False))
        return out

    def fresh_cold(current: Path) -> Path:
        for _ in range(20):  # a scheduler size this cluster never served: the plan predicts cold
            path = variant("cold", max_num_batched_tokens=16384 + 8 * random.randrange(1, 50_000))
            _, plan = sparkctl("reload", "-i", str(current), "--config", str(path), "--check")
            if plan["plan"]["prediction"] == "cold":
                return path
        sys.exit("no fresh max_num_batched_tokens found that the plan predicts cold")

    reloads = []
    current = keyed
    try:
        for kind in ("warm", "cold"):
            if kind == "warm":  # outside the compile hash: an environment mark
                new = variant("warm", env={**doc["runtime"].get("env", {}), "SPARKCTL_BENCH_MARK": str(time.time())})
            else:
                new = fresh_cold(current)
            loads = {"gateway": Load(public, name, args.load_streams, api_key=BENCH_KEY),
                     "direct": Load(engine, name, args.load_streams, api_key=BENCH_KEY)}  # fmt: skip
            for load in loads.values():
                load.start()
            time.sleep(1)
            rc, rdoc = sparkctl("reload", "-i", str(current), "--config", str(new), "--yes")
            time.sleep(1)
            for load in loads.values():
                load.stop()
            if rc != 0 or rdoc.get("outcome") != "ok":
                sys.exit(f"{kind} reload failed ({rdoc.get('outcome')}): {rdoc.get('reason')}")
            current = new
            plan = rdoc.get("plan") or {}
            held_by = "handshake" if (plan.get("gateway") or {}).get("hold") else "upstream-down hold"
            reloads.append({"kind": kind, "prediction": plan.get("prediction"), "downtime_s": rdoc.get("downtime_seconds"),
                            "held_by": held_by, **{side: load.summary() for side, load in loads.items()}})  # fmt: skip
            log(f"{kind} reload: downtime {rdoc.get('downtime_seconds')} s; "
                + "; ".join(f"{side}: {load.summary()}" for side, load in loads.items()))  # fmt: skip
    finally:
        if current != keyed:
            log("reloading back to the lab's own inventory ...")
            rc, back = sparkctl("reload", "-i", str(current), "--config", str(keyed), "--yes")
            if rc != 0:
                log(f"reload back to {keyed} failed ({back.get('outcome')}): {back.get('reason')}")
        rc, back = sparkctl("up", "-i", str(INVENTORY))  # and its front door without the key again
        if rc != 0:
            log(f"sparkctl up -i {INVENTORY} failed: {json.dumps(back)[-1000:]}")
        host_exec("head", ["rm", "-rf", keys_dir])

    d, g = figures["direct"], figures["gateway"]
    ttft_d, ttft_g = statistics.median(d["ttft"]) * 1000, statistics.median(g["ttft"]) * 1000
    tps_d, tps_g = statistics.median(d["tps"]), statistics.median(g["tps"])
    print(f"the lab: gateway {public} vs the engine {engine}; {args.streams} streams x {args.requests} requests x "
          f"{args.rounds} rounds ({len(d['ttft'])} requests each way), {args.max_tokens} tokens each")  # fmt: skip
    print(f"median TTFT : direct {ttft_d:7.2f} ms   gateway {ttft_g:7.2f} ms   added {ttft_g - ttft_d:+.2f} ms (budget +2 ms)")
    print(
        f"tok/s       : direct {tps_d:7.1f}      gateway {tps_g:7.1f}      {100 * (tps_g / tps_d - 1):+.1f}% (budget within 3%)"
    )
    print(f"reloads under load: {args.load_streams} OpenAI-client streams (max_retries=0) through the gateway and "
          f"{args.load_streams} straight at the engine, during the same reload")  # fmt: skip
    print(f"{'reload':7} {'downtime':>9}  {'side':8} {'requests':>8} {'failed':>7} {'longest':>8}  failed by kind / held by")
    for r in reloads:
        for side in ("gateway", "direct"):
            s = r[side]
            kinds = ", ".join(f"{k} x{n}" for k, n in sorted(s["failed_by_kind"].items())) or "-"
            extra = f"{kinds}; held by the {r['held_by']}" if side == "gateway" else kinds
            print(
                f"{r['kind']:7} {r['downtime_s']:8.2f}s  {side:8} {s['requests']:8d} {s['failed']:7d} {s['longest_s']:7.2f}s  {extra}"
            )
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--rounds", type=int, default=4, help="rounds of each (direct, gateway), alternating")
    ap.add_argument("--requests", type=int, default=6, help="requests per stream per round")
    ap.add_argument("--streams", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--step-scale", type=float, default=0.1, help="the simulator's SIM_STEP_TIME_SCALE")
    ap.add_argument("--lab", action="store_true", help="measure the lab's cluster, and reloads under load (needs root)")
    ap.add_argument("--load-streams", type=int, default=3, help="--lab: client threads each side during a reload")
    args = ap.parse_args()
    if args.lab:
        return lab_main(args)

    from test_gateway import Gateway
    from test_sim_serving import NAME, Server

    tmp = tempfile.mkdtemp(prefix="bench-gateway-")
    sim = Server(
        tmp,
        "--max-num-seqs",
        str(max(4, args.streams)),
        env={"SIM_CRASH_CONTEXT_TOKENS": "0", "SIM_STEP_TIME_SCALE": str(args.step_scale)},
    )
    # the gateway as sparkctl runs it: a key asked of every request (issue 39), the default bounds
    keys = Path(tmp) / "api-keys"
    keys.write_text(f"{BENCH_KEY}\n")
    gw = Gateway(tmp, sim.base, "--hold-s", "30", "--api-keys-file", str(keys))
    gw.client.headers["Authorization"] = f"Bearer {BENCH_KEY}"
    with_key = {"Authorization": f"Bearer {BENCH_KEY}"}
    figures: dict[str, dict[str, list]] = {"direct": {"ttft": [], "tps": []}, "gateway": {"ttft": [], "tps": []}}
    try:
        one_round(gw.base, NAME, args.streams, 1, 20, with_key)  # warm-up: connections, imports, the engine's first steps
        one_round(sim.base, NAME, args.streams, 1, 20)
        for k in range(args.rounds):
            for label, base in (("direct", sim.base), ("gateway", gw.base))[:: 1 if k % 2 == 0 else -1]:
                ttfts, tps = one_round(
                    base, NAME, args.streams, args.requests, args.max_tokens, with_key if label == "gateway" else None
                )
                figures[label]["ttft"] += ttfts
                figures[label]["tps"].append(tps)
                print(
                    f"round {k + 1} {label:7s}: median TTFT {statistics.median(ttfts) * 1000:7.2f} ms, {tps:8.1f} tok/s",
                    file=sys.stderr,
                )
        rejects = reject_latency(gw)
    finally:
        gw.stop()
        sim.stop()
    d, g = figures["direct"], figures["gateway"]
    ttft_d, ttft_g = statistics.median(d["ttft"]) * 1000, statistics.median(g["ttft"]) * 1000
    tps_d, tps_g = statistics.median(d["tps"]), statistics.median(g["tps"])
    n = len(d["ttft"])
    print(
        f"{args.streams} streams x {args.requests} requests x {args.rounds} rounds ({n} requests each way), "
        f"{args.max_tokens} tokens each, simulator step scale {args.step_scale}"
    )
    print(f"median TTFT : direct {ttft_d:7.2f} ms   gateway {ttft_g:7.2f} ms   added {ttft_g - ttft_d:+.2f} ms (budget +2 ms)")
    print(
        f"tok/s       : direct {tps_d:7.1f}      gateway {tps_g:7.1f}      {100 * (tps_g / tps_d - 1):+.1f}% "
        f"(budget within 3%; median over rounds)"
    )
    print(
        f"503 at once : median {statistics.median(rejects) * 1000:.2f} ms, max {max(rejects) * 1000:.2f} ms over "
        f"{len(rejects)} requests (expected hold 3600 s > hold_s 30 s; the issue: within 100 ms)"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
