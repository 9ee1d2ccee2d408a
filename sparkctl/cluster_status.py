"""One cluster's status as `sparkctl status --json` gives it: what runs where (its containers
against the launch's config hashes), the head's last good config and keeper, the gateway's view,
and the runtime's figures over a short sample of its /metrics. `sparkctl status` (cli/status.py)
prints it; `sparkctl fleet status` (fleet/status.py) reads every member's at once."""

from __future__ import annotations

import time
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.metrics import GENERATION_TOKENS, KV_USAGE, RUNNING, TTFT, WAITING, SpecCounters

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.inventory.models import Inventory
    from sparkctl.launch.plan import LaunchPlan
    from sparkctl.session import ClusterSession


def head_base(inv) -> tuple[str, int, str]:
    """The engine's HTTP endpoint on the head (behind the gateway: its engine route), fenced like
    every connection sparkctl makes."""
    from sparkctl.launch.endpoints import engine_endpoint
    from sparkctl.transport.guard import check_address

    address, port, path = engine_endpoint(inv)
    check_address(address, "the runtime's HTTP endpoint")
    return address, port, path


def runtime_session(inv: Inventory, plan: LaunchPlan) -> ClusterSession:
    """The cluster session of the hosts that run a container of the launch (SSH opened on first use)."""
    from sparkctl.session import ClusterSession

    return ClusterSession(inv, hosts=sorted({c.host for c in plan.containers}, key=list(inv.hosts).index))


def host_containers(inv: Inventory, plan: LaunchPlan, cluster: ClusterSession, head_kinds: frozenset = frozenset()) -> dict:
    """host -> its error and the launch's containers there (state, config hash against the plan),
    from the `containers` fact read again over `cluster`'s sessions: --watch keeps them open.
    `head_kinds`: more facts to read on the head in the same round trip."""
    from sparkctl.transport.redact import redact

    head = inv.hosts_with_role("head")[0]
    cluster.refresh({h: {"containers"} | (set(head_kinds) if h == head else set()) for h in cluster.hosts})
    hosts = {}
    for h in cluster.hosts:
        u, f = cluster.unreachable.get(h), cluster.facts.get(h)
        error, found = (u.message if u is not None else None), {}
        if error is None and f is not None and f.containers is not None:
            found = {c.name: c for c in f.containers}
        elif error is None:
            error = redact(f"{h}: cannot list containers: {f.errors.get('containers', 'no answer') if f else 'no answer'}")
        rows = []
        for spec in plan.for_host(h):
            c = found.get(spec.name)
            if c is None:
                row = {"name": spec.name, "state": "unknown (host not reached)" if error else "absent"}
            else:
                row = {"name": c.name, "state": c.status, "config_hash": c.config_hash, "image_id": c.image_id}
            rows.append({**row, "config_matches": c is not None and c.config_hash == plan.expected_hash(spec.name)})
        hosts[h] = {"error": error, "containers": rows}
    return hosts


def collect(inv, plan, sample_seconds: float) -> dict:
    base = head_base(inv)
    head = inv.hosts_with_role("head")[0]
    with runtime_session(inv, plan) as cluster:
        hosts = host_containers(inv, plan, cluster, head_kinds=frozenset({"applied", "keeper", "keeper_unit"}))
        # the last good config the head records (what `up`/`reload` applied and saw serving)
        applied = cluster.facts[head].applied if head in cluster.reached() else None
        keeper = keeper_status(inv, cluster.facts[head]) if head in cluster.reached() else None
    first, second = sample(base, sample_seconds)
    runtime = runtime_doc(first, second, sample_seconds)
    gateway = gateway_status(inv)
    healthy = (
        runtime["health"] == 200
        and all(c["state"] == "running" and c["config_matches"] for h in hosts.values() for c in h["containers"])
        and (gateway is None or gateway.get("state") == "passing")
    )
    doc = {
        "cluster": inv.cluster.name,
        "config_hash": plan.config_hash,
        "applied_config_hash": applied.config_hash if applied is not None else None,
        "healthy": healthy,
        "hosts": hosts,
        "runtime": runtime,
    }
    if gateway is not None:
        doc["gateway"] = gateway
    if keeper is not None:
        doc["keeper"] = keeper
    return doc


def keeper_status(inv: Inventory, head_facts: HostFacts) -> Optional[dict]:
    """The keeper's state (docs/keeper.md): off, not running, watching, or gave up and why."""
    from sparkctl.records import KeeperRecord  # pydantic: not for `sparkctl --help` (cli/status imports this module)

    unit, doc = head_facts.keeper_unit, head_facts.keeper or KeeperRecord()
    if unit is None:
        return None
    if not inv.keeper.enabled:
        return {"state": "off"}
    if unit.active != "active":
        return {"state": "not running", "unit": f"{unit.enabled}, {unit.active}"}
    if doc.state == "gave_up":
        return {"state": "gave up", "reason": doc.reason, "since": doc.since}
    return {"state": "watching", "recoveries_in_window": doc.recoveries_in_window}


def gateway_status(inv) -> Optional[dict]:
    """The front door's own view (facts/gateway.py: its /gateway/metrics on runtime.port), None
    without one (gateway.enabled: false)."""
    if not inv.gateway.enabled:
        return None
    from sparkctl.facts.gateway import fetch

    address, port = head_base(inv)[0], inv.runtime.port  # the public port: it answers even while holding
    f = fetch(address, port)
    if f.page is None:
        return {"url": f.url, "state": "not answering", "error": f.error}
    return {"url": f.url, **f.page.to_dict()}


def sample(base: tuple[str, int, str], seconds: float) -> tuple:
    """Two fetches of the endpoint `seconds` apart (the same one twice when /metrics gave nothing)."""
    from sparkctl.facts.endpoint import fetch

    first = fetch(*base)
    if not first.metrics:
        return first, first
    time.sleep(seconds)
    return first, fetch(*base)


def acceptance(window: SpecCounters, since_start: Optional[SpecCounters]) -> dict:
    """Speculative acceptance over the interval when drafts were made in it, else since the runtime
    started: an idle cluster still shows how its drafter does. `spec_decode_acceptance_over` says
    which ("interval", "since_start", or None with no drafts at all). Rate in percent, as vllm bench
    serve and doctor report it."""
    if window.drafts > 0:
        return {**window.fields(), "spec_decode_acceptance_over": "interval"}
    if since_start is not None and since_start.drafts > 0:
        return {**since_start.fields(), "spec_decode_acceptance_over": "since_start"}
    return {**SpecCounters().fields(), "spec_decode_acceptance_over": None}


def figures(a, b, seconds: float) -> dict:
    """What the runtime did between two fetches (EndpointFacts) `seconds` apart: tok/s, requests,
    KV use and mean TTFT over that interval only; speculative acceptance as `acceptance` says."""
    ma, mb = a.metrics, b.metrics

    def delta(name: str) -> float:
        return max(mb.get(name, 0.0) - ma.get(name, 0.0), 0.0)  # a restart resets counters: never negative

    spec = (mb.spec or SpecCounters()) - (ma.spec or SpecCounters())
    ttft_n = delta(f"{TTFT}_count")
    return {
        "running": int(mb.get(RUNNING, 0)),
        "waiting": int(mb.get(WAITING, 0)),
        "kv_cache_usage": round(mb.get(KV_USAGE, 0.0), 4),
        "output_tokens_per_s": round(delta(GENERATION_TOKENS) / seconds, 1),
        **acceptance(spec, mb.spec),
        "ttft_mean_s": round(delta(f"{TTFT}_sum") / ttft_n, 3) if ttft_n else None,
        "interval_s": round(seconds, 2),
    }


def runtime_doc(first, second, seconds: float) -> dict:
    r: dict = {"url": first.url, "health": second.health, "error": second.health_error}
    if second.models:
        r.update(model=second.models[0].get("id"), max_model_len=second.models[0].get("max_model_len"))
    if second.metrics_error:
        r["metrics_error"] = second.metrics_error
    if first.metrics and second.metrics:
        r.update(figures(first, second, seconds))
    return r
