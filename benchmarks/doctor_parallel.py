"""Doctor's wall time on the lab against the same per-host work done one host after another.

    python benchmarks/doctor_parallel.py [-i inventories/lab.yaml] [--repeats 5]

"parallel" is `sparkctl doctor` as it runs (every host's one-round-trip probe script at once,
the API's first /metrics page fetched alongside, a second page once TTFT_WINDOW has passed since
the first, then the pure checks). "sequential" does exactly that work one thing after another: the
API's first page, then connect, gather and parse one host's facts, then the next, then the second
page (after what is left of the same window: usually nothing, the hosts took longer), then the
same checks. Both open fresh SSH connections every repeat, so connection set-up is in both figures.
Prints the median of each and their ratio. Needs root and the lab (`sparkctl lab up`).
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]


def parallel(inv) -> tuple[float, list]:
    """(wall seconds, check results) of doctor as `sparkctl doctor` runs it."""
    from sparkctl.checks.doctor import doctor

    t = time.perf_counter()
    report = doctor(inv)
    return time.perf_counter() - t, report.results


def sequential(inv) -> tuple[float, list]:
    """(wall seconds, check results) of the same work, one host after another."""
    from sparkctl.checks import kinds_for
    from sparkctl.checks.base import Context
    from sparkctl.checks.doctor import TTFT_WINDOW, run_checks, select
    from sparkctl.errors import SparkctlError
    from sparkctl.facts.endpoint import EndpointFacts, fetch, read_again
    from sparkctl.facts.host import gather_host
    from sparkctl.launch.endpoints import engine_endpoint
    from sparkctl.session import Unreachable
    from sparkctl.transport.guard import check_address
    from sparkctl.transport.ssh import HostSession

    t = time.perf_counter()
    checks = select()
    kinds = kinds_for({c.group for c in checks} | {"ssh"})  # the fact kinds doctor gathers
    ctx = Context(inventory=inv, hosts=list(inv.hosts), facts={})
    address, port, path = engine_endpoint(inv)
    try:  # the first /metrics page, which doctor fetches while the hosts answer
        check_address(address, "the runtime's HTTP endpoint")
        ctx.endpoint = fetch(address, port, path)  # the engine, through the gateway's engine route (as doctor reads it)
    except SparkctlError as exc:
        ctx.endpoint = EndpointFacts(url=f"http://{address}:{port}{path}", health_error=exc.message)
    for name in inv.hosts:
        session = HostSession(inv.ssh_target(name))
        try:
            ctx.facts[name] = gather_host(session, inv, kinds, timeout=60)
        except SparkctlError as exc:
            ctx.unreachable[name] = Unreachable.from_error(name, exc)
        finally:
            session.close()
    if ctx.endpoint.metrics_at is not None:  # doctor's TTFT window, then its second page
        time.sleep(max(0.0, TTFT_WINDOW - (time.monotonic() - ctx.endpoint.metrics_at)))
    read_again(ctx.endpoint)
    results = run_checks(ctx, checks)
    return time.perf_counter() - t, results


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("-i", "--inventory", default=str(REPO / "inventories" / "lab.yaml"))
    ap.add_argument("--repeats", type=int, default=5)
    args = ap.parse_args()
    os.environ.setdefault("SPARKCTL_ONLY_NETWORKS", "127.0.0.0/8,10.231.0.0/16")  # the lab only

    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(args.inventory)
    parallel(inv)  # warm-up: imports, first connections
    par, seq = [], []
    for _ in range(args.repeats):
        par.append(parallel(inv)[0])
        seq.append(sequential(inv)[0])
    p, s = statistics.median(par), statistics.median(seq)
    print(f"hosts: {len(inv.hosts)} ({', '.join(inv.hosts)}), repeats: {args.repeats}, median wall time")
    print(f"doctor (hosts in parallel):      {p:6.3f} s   (runs: {', '.join(f'{x:.3f}' for x in par)})")
    print(f"same work, one host after another: {s:6.3f} s   (runs: {', '.join(f'{x:.3f}' for x in seq)})")
    print(f"ratio sequential / parallel:     {s / p:6.2f}x")


if __name__ == "__main__":
    sys.exit(main())
