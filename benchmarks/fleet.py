"""What a fleet buys: aggregate tok/s of N members through the fleet's front door vs one member
through the same door (the others drained at the door).

    python benchmarks/fleet.py [--members 2] [--rounds 3] [--streams 8] [--requests 3] [--max-tokens 200] \
        [--max-num-seqs 4] [--step-scale 0.1]
    sudo SPARKCTL_ONLY_NETWORKS=127.0.0.0/8,10.231.0.0/16 .venv/bin/python benchmarks/fleet.py --lab \
        [--fleet /var/lib/sparkctl-lab/fleet.yaml] [--rounds 2] [--streams 8] [--requests 2] [--max-tokens 200]

Loopback (the default): N members, each the lab's vLLM simulator (tests/unit/test_sim_serving.Server)
behind its own gateway (tests/unit/test_gateway.Gateway), and `python -m sparkctl.fleetdoor` in
front of them. --lab: the lab's fleet (its fleet file; the door deployed by `sparkctl fleet up`),
measured from this machine, draining and undraining over SSH (sparkctl/fleet/door_admin.py).
It holds the lab test lock for the whole run (benchmarks/labbench.py): it brings the second pair
up (`sparkctl lab up --clusters 2`), converges both members (`sparkctl up`), deploys the door
(fleet/door_step.py ensure_front_door), and at the end removes the door and the second pair.

Rounds alternate "fleet" (every member takes requests) and "one" (every member but the first
drained at the door), so drift hits both. Each round runs --streams client threads, and each thread
streams --requests chat completions, one after the other. Every thread is a conversation of its own,
so affinity spreads the threads over the members. tok/s is the round's completion tokens (the engines'
usage) over the round's wall time. Also printed: how the door routed (by affinity or by load) and
how many requests each member's engine was sent.

What it can show: the door spreads the load, and with members that are the bottleneck the fleet's
aggregate grows with its size. What it cannot show: a real pair's throughput. The simulator's
decode steps are timed sleeps (--step-scale; 1.0 = the seeds' hardware), so on loopback the
members do not compete for this machine's 2 cores. The ratio then says what routing
achieves, not what GPUs would. The lab's pairs are network namespaces of one machine that share
those 2 cores with the door, the gateways and the client, so a ratio below N there is
the machine, not the fleet.
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
sys.path.insert(0, str(REPO / "tests" / "unit"))  # the tests' simulator, gateway and door runners: one copy of each


def log(msg: str) -> None:
    print(msg, file=sys.stderr, flush=True)


def one_round(base: str, model: str, streams: int, requests: int, max_tokens: int, tag: str) -> tuple[float, int]:
    """(aggregate completion tok/s, failed requests) of one round."""
    import httpx

    tokens, failed = [0], [0]
    lock = threading.Lock()

    def client(i: int) -> None:
        history = [{"role": "system", "content": "You answer at length."},
                   {"role": "user", "content": f"Conversation {tag}-{i}: tell me about the river."}]  # fmt: skip
        with httpx.Client(base_url=base, timeout=300, trust_env=False) as c:
            for _ in range(requests):
                body = {"model": model, "stream": True, "max_tokens": max_tokens, "temperature": 0, "ignore_eos": True,
                        "stream_options": {"include_usage": True}, "messages": history}  # fmt: skip
                used, text = 0, []
                try:
                    with c.stream("POST", "/v1/chat/completions", json=body) as r:
                        r.raise_for_status()
                        for line in r.iter_lines():
                            if not line.startswith("data: {"):
                                continue
                            ev = json.loads(line[6:])
                            text += [(ch.get("delta") or {}).get("content") or "" for ch in ev.get("choices") or ()]
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

    threads = [threading.Thread(target=client, args=(i,)) for i in range(streams)]
    t = time.perf_counter()
    for th in threads:
        th.start()
    for th in threads:
        th.join()
    return tokens[0] / (time.perf_counter() - t), failed[0]


def measure(base: str, model: str, members: list[str], set_one, args) -> dict:
    """Alternating rounds of the whole fleet and of its first member alone."""
    figures: dict[str, list[float]] = {"fleet": [], "one": []}
    failures = 0
    one_round(base, model, args.streams, 1, 20, "warm")  # connections, imports, the engines' first steps
    for k in range(args.rounds):
        for label in ("fleet", "one")[:: 1 if k % 2 == 0 else -1]:
            set_one(label == "one")
            tps, failed = one_round(base, model, args.streams, args.requests, args.max_tokens, f"{label}{k}")
            figures[label].append(tps)
            failures += failed
            log(f"round {k + 1} {label:5s}: {tps:8.1f} tok/s{f', {failed} failed' if failed else ''}")
    set_one(False)
    return {"figures": figures, "failed": failures}


def report(result: dict, n: int, args, where: str) -> None:
    f = result["figures"]
    fleet, one = statistics.median(f["fleet"]), statistics.median(f["one"])
    print(
        f"{where}: {n} members, {args.streams} streams x {args.requests} requests x {args.rounds} rounds, "
        f"{args.max_tokens} tokens each"
    )
    print(
        f"aggregate tok/s : fleet {fleet:8.1f}   one member {one:8.1f}   ratio {fleet / one:.2f} x (ideal {n} x; median over rounds)"
    )
    print(f"failed requests : {result['failed']}")


def door_counts(metrics_text: str) -> str:
    from prometheus_client.parser import text_string_to_metric_families

    routed, sent = {}, {}
    for fam in text_string_to_metric_families(metrics_text):
        for s in fam.samples:
            if s.name == "sparkctl_fleetdoor_routed_total":
                routed[s.labels["by"]] = int(s.value)
            elif s.name == "sparkctl_fleetdoor_member_requests_total":
                sent[s.labels["member"]] = int(s.value)
    return f"door routed by affinity {routed.get('affinity', 0)}, by load {routed.get('load', 0)}; sent per member {sent}"


def loopback_main(args) -> int:
    import httpx
    from test_fleetdoor import FleetDoor
    from test_gateway import Gateway
    from test_sim_serving import NAME, Server

    tmp = tempfile.mkdtemp(prefix="bench-fleet-")
    env = {"SIM_CRASH_CONTEXT_TOKENS": "0", "SIM_STEP_TIME_SCALE": str(args.step_scale)}
    names = [f"m{i + 1}" for i in range(args.members)]
    sims, gws, door = {}, {}, None
    try:
        for n in names:
            sims[n] = Server(tmp, "--max-num-seqs", str(args.max_num_seqs), env=env)
            gws[n] = Gateway(tmp, sims[n].base, "--hold-s", "30")
        door = FleetDoor(tmp, {n: (gws[n].base, sims[n].base) for n in names})

        def set_one(one: bool) -> None:
            for n in names[1:]:
                r = door.ctl("drain" if one else "undrain", n, *(["--wait-s", "60"] if one else []))
                if r.returncode != 0:
                    sys.exit(f"fleet door {'drain' if one else 'undrain'} {n}: {r.stderr}")

        result = measure(door.base, NAME, names, set_one, args)
        counts = door_counts(httpx.get(door.base + "/fleetdoor/metrics").text)
    finally:
        for x in [door, *gws.values(), *sims.values()]:
            if x is not None:
                x.stop()
    report(result, len(names), args, f"loopback (simulator step scale {args.step_scale}, --max-num-seqs {args.max_num_seqs})")
    print(counts)
    return 0


def lab_main(args) -> int:
    """Under the lab's test lock: the second pair up, both members converged, the door deployed;
    the rounds; then the door removed and the lab back to one pair (whatever happened)."""
    import httpx

    from labbench import ENV, SPARKCTL, require_lab

    lock = require_lab()  # noqa: F841 (held until exit)
    from sparkctl.fleet import door_admin
    from sparkctl.fleet.door_step import ensure_front_door, plan_lines
    from sparkctl.fleet.model import load_fleet

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
            sys.exit("the fleet door did not start: " + "; ".join(plan_lines(recap)))
        base = fleet.front_door_url
        names = [m.name for m in fleet.members]
        model = fleet.members[0].inventory.runtime.served_model_name

        def set_one(one: bool) -> None:
            for n in names[1:]:
                door_admin.drain(fleet, n, wait_s=120) if one else door_admin.undrain(fleet, n)

        result = measure(base, model, names, set_one, args)
        counts = door_counts(httpx.get(base + "/fleetdoor/metrics", timeout=5, trust_env=False).text)
    finally:
        import sparkctl_lab.api as lab

        lab.host_exec("head", ["docker", "rm", "-f", "sparkctl-fleet-door"])
        cli("lab", "up", "--clusters", "1")
    report(result, len(names), args, f"lab fleet {fleet.name} ({args.fleet})")
    print(counts)
    print("note: the lab's two pairs, the door, the gateways and this client share the machine's 2 cores")
    return 0


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--members", type=int, default=2, help="loopback: members in the fleet")
    ap.add_argument("--rounds", type=int, default=3, help="rounds of each (fleet, one member), alternating")
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
