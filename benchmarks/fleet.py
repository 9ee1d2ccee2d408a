"""What a fleet's front door costs and buys: TTFT and aggregate tok/s through vllm-router with every
member, through it with one member (the others taken out), and straight to that member's own
front door (no router), in one run.

    python benchmarks/fleet.py [--members 2] [--rounds 3] [--streams 8] [--requests 3] [--max-tokens 200] \
        [--max-num-seqs 4] [--step-scale 0.1]
    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/fleet.py --lab \
        [--fleet /var/lib/sparkctl-lab/fleet.yaml] [--rounds 2] [--streams 8] [--requests 2] [--max-tokens 200]

Loopback (the default): N members, each the lab's vLLM simulator (tests/unit/test_sim_serving.Server)
behind its own gateway (tests/unit/test_gateway.Gateway), and the real vllm-router
(tests/unit/vllm_router_runner.py: the wheel the lab image carries) in front of them, members taken
out and put back over its worker API. --lab: the lab's fleet (its fleet file; the router deployed
by `sparkctl fleet up`), measured from this machine, members taken out and put back with
sparkctl/fleet/router_admin.py. It holds the lab test lock for the whole run (benchmarks/labbench.py):
it brings the second pair up (`sparkctl lab up --clusters 2`), converges both members (`sparkctl up`),
deploys the router (fleet/router_step.py ensure_front_door), and at the end removes it and the second pair.

Rounds cycle "fleet" (router, every member), "one" (router, every member but the first taken out)
and "direct" (the first member's own front door), in a rotating order so drift hits all three.
Each round runs --streams client threads, and each thread streams --requests chat completions, one
after the other (a conversation: each turn's prompt starts with the ones before, so cache-aware
routing keeps it on one member). tok/s is the round's completion tokens (the engines' usage) over
the round's wall time; TTFT is each request's first content chunk, median over the round. Also
printed: how many requests the router sent each member (its own counter).

What it can show: the router's own cost per request (one vs direct: the same engine, with and
without the router in the path) and that it spreads conversations (fleet vs one). What it cannot
show: a real pair's throughput. The simulator's decode steps are timed sleeps (--step-scale; 1.0 =
the seeds' hardware), so on loopback the members do not compete for this machine's 2 cores, and
the ratio says what routing achieves, not what GPUs would. The lab's pairs are network namespaces
of one machine that share those 2 cores with the router, the gateways and the client, so a ratio
below N there is the machine, not the fleet; and a TTFT difference of a millisecond or two is
within what 2 busy cores add to any hop.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO / "tests" / "unit"))  # the tests' simulator, gateway and router runners: one copy of each


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def one_round(base: str, model: str, streams: int, requests: int, max_tokens: int, tag: str) -> tuple[float, float, int]:
    """(aggregate completion tok/s, median TTFT in s, failed requests) of one round."""
    import httpx

    tokens, failed, ttfts = [0], [0], []
    lock = threading.Lock()

    def client(i: int) -> None:
        history = [{"role": "system", "content": "You answer at length."},
                   {"role": "user", "content": f"Conversation {tag}-{i}: tell me about the river."}]  # fmt: skip
        with httpx.Client(base_url=base, timeout=300, trust_env=False) as c:
            for _ in range(requests):
                body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                        "stream_options": {"include_usage": True}, "messages": history}  # fmt: skip
                used, text, first = 0, [], None
                t0 = time.perf_counter()
                try:
                    with c.stream("POST", "/v1/chat/completions", json=body) as r:
                        r.raise_for_status()
                        for line in r.iter_lines():
                            if not line.startswith("data: {"):
                                continue
                            ev = json.loads(line[6:])
                            chunk = [(ch.get("delta") or {}).get("content") or "" for ch in ev.get("choices") or ()]
                            if first is None and any(chunk):
                                first = time.perf_counter() - t0
                            text += chunk
                            if ev.get("usage"):
                                used = ev["usage"]["completion_tokens"]
                except httpx.HTTPError:
                    with lock:
                        failed[0] += 1
                    continue
                history = [*history, {"role": "assistant", "content": "".join(text)},
                           {"role": "user", "content": "Go on."}]  # fmt: skip
                with lock:
                    tokens[0] += used
                    if first is not None:
                        ttfts.append(first)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return tokens[0] / (time.perf_counter() - t), statistics.median(ttfts) if ttfts else float("nan"), failed[0]


MODES = ("fleet", "one", "direct")


def measure(router: str, direct: str, model: str, set_one, args) -> dict:
    """Rounds of the whole fleet through the router, its first member alone through the router, and
    that member straight, in a rotating order."""
    figures: dict[str, list[tuple[float, float]]] = {m: [] for m in MODES}
    failures = 0
    for base in (router, direct):  # connections, imports, the engines' first steps
        one_round(base, model, args.streams, 1, 20, "warm")
    for k in range(args.rounds):
        for mode in MODES[k % 3 :] + MODES[: k % 3]:
            set_one(mode == "one")
            tps, ttft, failed = one_round(direct if mode == "direct" else router, model, args.streams, args.requests,
                                          args.max_tokens, f"{mode}{k}")  # fmt: skip
            figures[mode].append((tps, ttft))
            failures += failed
            log(f"round {k + 1} {mode:6s}: {tps:8.1f} tok/s, TTFT {ttft * 1000:7.1f} ms{f', {failed} failed' if failed else ''}")
    set_one(False)
    return {"figures": figures, "failed": failures}


def report(result: dict, n: int, args, where: str) -> None:
    f = result["figures"]
    tps = {m: statistics.median(x[0] for x in f[m]) for m in MODES}
    ttft = {m: statistics.median(x[1] for x in f[m]) for m in MODES}
    print(
        f"{where}: {n} members, {args.streams} streams x {args.requests} requests x {args.rounds} rounds, "
        f"{args.max_tokens} tokens each (medians over rounds)"
    )
    print(f"{'':26s} {'tok/s':>9s} {'TTFT ms':>9s}")
    for m, label in (
        ("fleet", f"router, {n} members"),
        ("one", "router, first member only"),
        ("direct", "first member, no router"),
    ):
        print(f"{label:26s} {tps[m]:9.1f} {ttft[m] * 1000:9.1f}")
    print(f"fleet / one member: {tps['fleet'] / tps['one']:.2f} x (ideal {n} x); the router's TTFT cost: "
          f"{(ttft['one'] - ttft['direct']) * 1000:+.1f} ms (one vs direct)")  # fmt: skip
    print(f"failed requests : {result['failed']}")


def running(metrics_text: str) -> dict[str, float]:
    """Requests in flight per worker, as the router counts them (vllm_router_running_requests)."""
    from prometheus_client.parser import text_string_to_metric_families

    return {s.labels["worker"]: s.value for fam in text_string_to_metric_families(metrics_text) for s in fam.samples
            if s.name == "vllm_router_running_requests"}  # fmt: skip


def router_counts(metrics_text: str) -> str:
    """Requests the router sent each worker (its own counter, vllm_router_processed_requests_total)."""
    from prometheus_client.parser import text_string_to_metric_families

    sent = {}
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            if s.name == "vllm_router_processed_requests_total":
                sent[s.labels["worker"]] = int(s.value)
    return f"router sent per member: {sent}"


def loopback_main(args) -> int:
    import httpx
    from test_gateway import Gateway
    from test_sim_serving import NAME, Server
    from vllm_router_runner import VllmRouter

    tmp = tempfile.mkdtemp(prefix="bench-fleet-")
    env = {"SIM_CRASH_CONTEXT_TOKENS": "0", "SIM_STEP_TIME_SCALE": str(args.step_scale)}
    names = [f"m{i + 1}" for i in range(args.members)]
    sims, gws, router = {}, {}, None
    try:
        for n in names:
            sims[n] = Server(tmp, "--max-num-seqs", str(args.max_num_seqs), env=env)
            gws[n] = Gateway(tmp, sims[n].base, "--hold-s", "30")
        # as sparkctl launches it (fleet/router_launch.py): fast health checks, and cache_aware's
        # balancing from one member's full batch (the router's own threshold is 64)
        router = VllmRouter.on_loopback(tmp, [gws[n].base for n in names], "--health-check-interval-secs", "2",
                                        "--balance-abs-threshold", str(args.max_num_seqs))  # fmt: skip

        def set_one(one: bool) -> None:
            for n in names[1:]:
                r = httpx.post(f"{router.base}/{'remove_worker' if one else 'add_worker'}", params={"url": gws[n].base},
                               timeout=30)  # fmt: skip
                if r.status_code != 200 and "already exists" not in r.text and "not found" not in r.text.lower():
                    sys.exit(f"vllm-router {'remove' if one else 'add'} {n}: HTTP {r.status_code} {r.text}")
            if one:  # out of the router: wait for its requests in flight to end
                while any(running(httpx.get(router.metrics_url).text).get(gws[n].base) for n in names[1:]):
                    time.sleep(0.1)

        result = measure(router.base, gws[names[0]].base, NAME, set_one, args)
        counts = router_counts(httpx.get(router.metrics_url).text)
    finally:
        for x in [router, *gws.values(), *sims.values()]:
            if x is not None:
                x.stop()
    report(result, len(names), args, f"loopback (simulator step scale {args.step_scale}, --max-num-seqs {args.max_num_seqs})")
    print(counts)
    return 0


def lab_main(args) -> int:
    """Under the lab's test lock: the second pair up, both members converged, the router deployed;
    the rounds; then the router removed and the lab back to one pair (whatever happened)."""
    import httpx

    from labbench import ENV, SPARKCTL, require_lab

    lock = require_lab()  # noqa: F841 (held until exit)
    from sparkctl.fleet import router_admin
    from sparkctl.fleet.model import load_fleet
    from sparkctl.fleet.router_step import ensure_front_door, plan_lines

    def cli(*a: str) -> None:
        log(f"sparkctl {' '.join(a)} ...")
        p = subprocess.run([*SPARKCTL, *a], capture_output=True, text=True, env=ENV, timeout=1800)
        if p.returncode != 0:
            sys.exit(f"sparkctl {' '.join(a)} failed ({p.returncode}):\n{p.stdout[-2000:]}\n{p.stderr[-2000:]}")

    try:
        cli("lab", "up", "--clusters", "2")
        fleet = load_fleet(args.fleet)
        for m in fleet.members:
            cli("up", "-i", str(m.inventory_path))
        recap = ensure_front_door(fleet)
        if recap.failed:
            sys.exit("the fleet's router did not start: " + "; ".join(plan_lines(recap)))
        names = [m.name for m in fleet.members]
        model = fleet.members[0].inventory.runtime.served_model_name
        direct = router_admin.status(fleet)["members"][names[0]]["url"]

        def set_one(one: bool) -> None:
            for n in names[1:]:
                router_admin.drain(fleet, n, wait_s=120) if one else router_admin.undrain(fleet, n)

        result = measure(fleet.front_door_url, direct, model, set_one, args)
        counts = router_counts(httpx.get(fleet.router_metrics_url, timeout=5, trust_env=False).text)
    finally:
        import sparkctl_lab.api as lab

        lab.host_exec("head", ["docker", "rm", "-f", "sparkctl-fleet-door"])
        cli("lab", "up", "--clusters", "1")
    report(result, len(names), args, f"lab fleet {fleet.name} ({args.fleet})")
    print(counts)
    print("note: the lab's two pairs, the router, the gateways and this client share the machine's 2 cores")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=2, help="loopback: members in the fleet")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each (fleet, one member, direct), rotating")
    ap.add_argument("--streams", type=int, default=8, help="client threads, each a conversation of its own")
    ap.add_argument("--requests", type=int, default=3, help="requests per thread per round (a conversation's turns)")
    ap.add_argument("--max-tokens", type=int, default=200)
    ap.add_argument("--max-num-seqs", type=int, default=4, help="loopback: each simulated engine's batch bound")
    ap.add_argument("--step-scale", type=float, default=0.1, help="loopback: the simulator's SIM_STEP_TIME_SCALE")
    ap.add_argument("--lab", action="store_true", help="measure the lab's two-pair fleet (needs root)")
    ap.add_argument("--fleet", default="/var/lib/sparkctl-lab/fleet.yaml", help="--lab: the fleet file")
    args = ap.parse_args()
    if args.members < 1 or args.streams < 1 or args.rounds < 1:
        ap.error("--members, --streams and --rounds must be at least 1")
    return lab_main(args) if args.lab else loopback_main(args)


if __name__ == "__main__":
    sys.exit(main())
