"""One doctor run: gather every host's facts at once (one round trip each), fetch the API
concurrently, probe each rail's bandwidth (longer with --deep), then run the selected checks
(pure) over it all.

Everything per host runs in parallel (the cluster session, sparkctl/session.py); a host that
cannot be reached becomes an `ssh.reachable` failure (or `ssh.host_key`, by the reason the
transport gave) and `skipped` for its other checks, never an exception.
"""

from __future__ import annotations

import difflib
import threading
import time
from collections import Counter
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Iterable, Optional

from sparkctl import waits
from sparkctl.checks import GROUPS, REGISTRY, kinds_for
from sparkctl.checks.base import SCHEMA_VERSION, STATUSES, Check, CheckResult, Context, head_host
from sparkctl.errors import InputError, SparkctlError
from sparkctl.inventory.models import Inventory

if TYPE_CHECKING:
    from sparkctl.facts.endpoint import EndpointFacts

ALWAYS = "ssh.reachable"  # why a host has no results: shown whatever --only says
TTFT_WINDOW = 1.0  # seconds between the two /metrics pages runtime.ttft compares (usually the facts round trip)


@dataclass
class Report:
    results: list[CheckResult]
    hosts: list[str]
    seconds: float = 0.0
    deep: bool = False
    timings: dict[str, float] = field(default_factory=dict)  # host -> seconds for its facts

    @property
    def failed(self) -> bool:
        return any(r.status == "failed" for r in self.results)

    def summary(self) -> dict:
        counts = Counter(r.status for r in self.results)
        return {
            **{status: counts[status] for status in STATUSES},
            "failed_checks": sorted({r.name for r in self.results if r.status == "failed"}),
            "hosts": self.hosts,
            "deep": self.deep,
        }

    def to_dict(self) -> dict:
        return {
            "schema_version": SCHEMA_VERSION,
            "checks": [r.to_dict() for r in self.results],
            "summary": self.summary(),
            "seconds": round(self.seconds, 3),
            "host_seconds": {h: round(s, 3) for h, s in self.timings.items()},
        }


def _split(values: Optional[Iterable[str]]) -> list[str]:
    return [p.strip() for v in values or [] for p in v.split(",") if p.strip()]


def _unknown(kind: str, bad: list[str], known: Iterable[str]) -> InputError:
    known = list(known)
    hints = []
    for b in bad:
        close = difflib.get_close_matches(b, known, n=1)
        hints.append(f"{b!r}" + (f" (did you mean {close[0]!r}?)" if close else ""))
    return InputError(f"unknown {kind}: {', '.join(hints)}", fix=f"{kind}s: {', '.join(known)}")


def select(only: Optional[Iterable[str]] = None, ignore: Optional[Iterable[str]] = None, deep: bool = False) -> list[Check]:
    """The checks a run does, in registry order; unknown groups or names are input errors."""
    groups, names = _split(only), _split(ignore)
    if "fleet" in groups:  # checks/fleet.py: between a fleet's members, not one cluster's
        raise InputError(
            "the fleet checks run between a fleet's members, not on one cluster",
            fix="sparkctl fleet doctor -f FLEET --only fleet",
        )
    bad = [g for g in groups if g not in GROUPS]
    if bad:
        raise _unknown("check group", bad, GROUPS)
    cluster_checks = {n: c for n, c in REGISTRY.items() if not c.fleet}  # the fleet's are `fleet doctor`'s
    bad = [n for n in names if n not in cluster_checks]
    if bad:
        raise _unknown("check name", bad, cluster_checks)
    return [
        c
        for c in cluster_checks.values()
        if c.name not in names and (deep or not c.deep_only) and (not groups or c.group in groups or c.name == ALWAYS)
    ]


def run_checks(ctx: Context, checks: list[Check]) -> list[CheckResult]:
    results = []
    for c in checks:
        try:
            results += c.run(ctx)
        except Exception as exc:  # a bug in one check must not hide the others
            for h in ctx.hosts:
                results.append(
                    CheckResult(
                        c.name,
                        c.group,
                        h,
                        "failed",
                        f"check crashed: {type(exc).__name__}: {exc}",
                        "a sparkctl bug: report it with `sparkctl doctor --json`",
                    )
                )
    if ctx.unreachable and not any(c.name == ALWAYS for c in checks):
        results = [r for r in REGISTRY[ALWAYS].run(ctx) if r.status == "failed"] + results
    order = {h: i for i, h in enumerate(ctx.hosts)}
    return sorted(results, key=lambda r: order.get(r.host, len(order)))  # stable: check order within a host


def doctor(
    inv: Inventory,
    hosts: Optional[Iterable[str]] = None,
    only: Optional[Iterable[str]] = None,
    ignore: Optional[Iterable[str]] = None,
    deep: bool = False,
    progress: Callable[[str], None] = lambda text: None,
    allow_loading: bool = False,
) -> Report:
    from sparkctl.session import ClusterSession

    start = time.monotonic()
    checks = select(only, ignore, deep)
    groups = {c.group for c in checks} | {"ssh"}
    kinds = kinds_for(groups)
    if deep and any(c.name == "engram.checksums" for c in checks):
        kinds.add("engram_rehash")  # --deep re-hashes the whole RAM copy (minutes for ~220 GiB)
    if deep and any(c.name == "weights.verified" for c in checks):
        kinds.add("weights_rehash")  # and every node's whole checkpoint (minutes for ~167 GB)
    names = _split(hosts) if hosts is not None else list(inv.hosts)
    with ClusterSession(inv, names) as cluster:  # InputError for unknown hosts
        selected = cluster.hosts
        ctx = Context(inventory=inv, hosts=selected, facts={}, deep=deep, allow_loading=allow_loading)

        endpoint_thread = None
        heads = head_host(ctx)
        if "runtime" in groups and heads:

            def fetch_endpoint() -> None:
                from sparkctl.facts.endpoint import EndpointFacts, fetch
                from sparkctl.launch.endpoints import engine_endpoint
                from sparkctl.transport.guard import check_address

                address, port, path = engine_endpoint(inv)  # the engine, not the gateway's held door
                try:
                    check_address(address, "the runtime's HTTP endpoint")
                    ctx.endpoint = fetch(address, port, path)
                except SparkctlError as exc:
                    ctx.endpoint = EndpointFacts(url=f"http://{address}:{port}{path}", health_error=exc.message)

            endpoint_thread = threading.Thread(target=fetch_endpoint, name="sparkctl-endpoint", daemon=True)
            endpoint_thread.start()
        gateway_thread = None
        if "gateway" in groups and heads and inv.gateway.enabled:

            def fetch_gateway() -> None:
                from sparkctl.facts.gateway import GatewayFacts, fetch
                from sparkctl.launch.gateway import METRICS_PATH
                from sparkctl.transport.guard import check_address

                address = inv.hosts[heads[0]].ssh.address
                try:
                    check_address(address, "the gateway's HTTP endpoint")
                    ctx.gateway = fetch(address, inv.runtime.port)  # the public port: it answers even while holding
                except SparkctlError as exc:
                    ctx.gateway = GatewayFacts(url=f"http://{address}:{inv.runtime.port}{METRICS_PATH}", error=exc.message)

            gateway_thread = threading.Thread(target=fetch_gateway, name="sparkctl-gateway", daemon=True)
            gateway_thread.start()

        probe_thread = None
        if any(c.name == "fabric.bandwidth" for c in checks):
            # the pings first (they say which rails to probe), then the probe over the fabric while
            # the other facts come over the management net and the TTFT window below waits: the
            # probe is a second of traffic per sibling group, so the rest hides behind it
            progress(f"pinging the rails from {', '.join(selected)}")
            pinged = cluster.need({"ping"}, timeout=60, wait=120)
            progress("probing each rail's bandwidth" + (" (--deep)" if deep else ""))
            probe_thread = threading.Thread(
                target=_probe_rails, args=(ctx, cluster.fleet, dict(pinged)), name="sparkctl-bandwidth", daemon=True
            )
            probe_thread.start()
        progress(f"gathering facts from {', '.join(selected)}")
        ctx.facts = cluster.need(kinds, timeout=3600 if deep else 60, wait=120)
        ctx.unreachable = dict(cluster.unreachable)
        if endpoint_thread is not None:
            waits.join(endpoint_thread, timeout=15)
            if ctx.endpoint is not None:  # a second page: runtime.ttft judges the seconds doctor took
                from sparkctl.facts.endpoint import read_again

                if ctx.endpoint.metrics_at is not None:  # at least TTFT_WINDOW s: a few first tokens to judge
                    time.sleep(max(0.0, TTFT_WINDOW - (time.monotonic() - ctx.endpoint.metrics_at)))
                read_again(ctx.endpoint)
                _look_longer_if_still(ctx.endpoint)
        if gateway_thread is not None:
            waits.join(gateway_thread, timeout=15)
            if ctx.gateway is not None and ctx.gateway.at is not None:
                # a second page: gateway.zero_tokens judges the streams that ended in between (at
                # least TTFT_WINDOW s; usually the facts round trip and the endpoint's window)
                from sparkctl.facts.gateway import read_again as gateway_again

                time.sleep(max(0.0, TTFT_WINDOW - (time.monotonic() - ctx.gateway.at)))
                gateway_again(ctx.gateway)
        if probe_thread is not None:
            waits.join(probe_thread)

    results = run_checks(ctx, checks)
    return Report(results, selected, time.monotonic() - start, deep, dict(cluster.seconds))


def _look_longer_if_still(endpoint: EndpointFacts) -> None:
    """Nothing moved between the two pages while requests ran: read once more, STALL_SECONDS after
    the first page, before runtime.progress calls it a hang (one slow step is not)."""
    from sparkctl.checks.runtime import STALL_SECONDS
    from sparkctl.facts.endpoint import read_again
    from sparkctl.facts.metrics import held_without_progress

    if endpoint.earlier is None or endpoint.window_s is None or endpoint.window_s >= STALL_SECONDS:
        return
    if held_without_progress(endpoint.earlier, endpoint.metrics):
        time.sleep(STALL_SECONDS - endpoint.window_s)
        read_again(endpoint, keep_earlier=True)


def _probe_rails(ctx: Context, fleet, pinged: dict) -> None:
    """iperf3 over every rail that pinged (`pinged`: the hosts' facts with their pings), sibling
    groups one after another (PROBE_SECONDS each; DEEP_SECONDS with --deep). The Engram re-hash of
    --deep is a fact of the round trip."""
    from sparkctl.facts import bandwidth

    reached = [h for h in ctx.hosts if h in pinged]
    ready = bandwidth.pinging(ctx.inventory, pinged, bandwidth.rails(ctx.inventory, reached))
    seconds = bandwidth.DEEP_SECONDS if ctx.deep else bandwidth.PROBE_SECONDS
    ctx.bandwidth.update(bandwidth.measure(fleet, ready, seconds))
