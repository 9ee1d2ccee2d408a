"""`sparkctl status`: what runs where, its config hash against the inventory's, health, live figures."""

from __future__ import annotations

import time
from typing import Annotated

import typer

from sparkctl.cli.options import InventoryOpt, JsonOpt, require_inventory


def _containers(session, inv) -> list[dict]:
    """This cluster's containers on one host, from the `containers` fact (facts/host.py)."""
    from sparkctl.errors import HostError
    from sparkctl.facts.host import gather_host

    f = gather_host(session, inv, {"containers"})
    if f.containers is None:
        raise HostError(f"{session.name}: cannot list containers: {f.errors.get('containers', 'no answer')}")
    return [{"name": c.name, "state": c.status, "config_hash": c.config_hash, "image_id": c.image_id} for c in f.containers]


def collect(inv, sample_seconds: float) -> dict:
    from sparkctl.facts.endpoint import fetch
    from sparkctl.runtime.launch import render
    from sparkctl.transport.guard import check_address
    from sparkctl.transport.ssh import Fleet

    plan = render(inv)
    head = inv.hosts_with_role("head")[0]
    address = inv.hosts[head].ssh.address
    check_address(address, "the runtime's HTTP endpoint")
    with Fleet(inv, hosts=sorted({c.host for c in plan.containers}, key=list(inv.hosts).index)) as fleet:
        found = fleet.map(lambda s: _containers(s, inv))
    hosts = {}
    for h, o in found.items():
        want = [c.name for c in plan.for_host(h)]
        have = {c["name"]: c for c in (o.value or [])}
        hosts[h] = {
            "error": o.error,
            "containers": [
                {**have.get(n, {"name": n, "state": "unknown (host not reached)" if o.error else "absent"}),
                 "config_matches": have.get(n, {}).get("config_hash") == plan.config_hash}
                for n in want
            ],
        }
    first = fetch(address, inv.runtime.port)
    runtime: dict = {"url": first.url, "health": first.health, "error": first.health_error}
    if first.models:
        m = first.models[0]
        runtime.update(model=m.get("id"), max_model_len=m.get("max_model_len"))
    if first.metrics:
        time.sleep(sample_seconds)
        second = fetch(address, inv.runtime.port)
        a, b = first.metrics, second.metrics or first.metrics
        gen = b.get("vllm:generation_tokens_total", 0) - a.get("vllm:generation_tokens_total", 0)
        drafts = b.get("vllm:spec_decode_num_drafts_total", 0)
        draft_tokens = b.get("vllm:spec_decode_num_draft_tokens_total", 0)
        accepted = b.get("vllm:spec_decode_num_accepted_tokens_total", 0)
        runtime.update(
            running=int(b.get("vllm:num_requests_running", 0)),
            waiting=int(b.get("vllm:num_requests_waiting", 0)),
            kv_cache_usage=round(b.get("vllm:kv_cache_usage_perc", 0.0), 4),
            output_tokens_per_s=round(max(gen, 0) / sample_seconds, 1),
            spec_decode_acceptance_rate=round(accepted / draft_tokens, 3) if draft_tokens else None,
            spec_decode_acceptance_length=round(1 + accepted / drafts, 2) if drafts else None,
        )
    healthy = runtime["health"] == 200 and all(
        c["state"] == "running" and c["config_matches"] for h in hosts.values() for c in h["containers"]
    )
    return {"cluster": inv.cluster.name, "config_hash": plan.config_hash, "healthy": healthy, "hosts": hosts, "runtime": runtime}


def status(
    inventory: InventoryOpt = None,
    json_out: JsonOpt = False,
    sample: Annotated[float, typer.Option("--sample", help="Seconds between the two /metrics scrapes for tok/s.")] = 1.0,
) -> None:
    """What runs where (config hash against the inventory's), health, live tok/s, acceptance, KV usage.

    Exit 0 when every runtime container runs the inventory's config and /health is 200, else 1.
    Speculative acceptance is cumulative since the runtime started (vLLM's counters)."""
    from sparkctl.cli.output import console, print_json
    from sparkctl.inventory.loader import load_inventory

    inv = load_inventory(require_inventory(inventory))
    doc = collect(inv, max(0.2, sample))
    if json_out:
        print_json(doc)
        raise typer.Exit(0 if doc["healthy"] else 1)
    from rich.table import Table

    t = Table(title=f"cluster {doc['cluster']}: inventory config {doc['config_hash']}", title_justify="left")
    for col in ("host", "container", "state", "config", "image"):
        t.add_column(col)
    for h, info in doc["hosts"].items():
        if info["error"]:
            t.add_row(h, "-", f"[red]{info['error']}[/]", "", "")
        for c in info["containers"]:
            match = "[green]matches[/]" if c["config_matches"] else f"[yellow]{c.get('config_hash') or '-'}[/]"
            t.add_row(h, c["name"], c["state"], match, (c.get("image_id") or "")[7:19])
    con = console()
    con.print(t)
    r = doc["runtime"]
    if r["health"] is None:
        con.print(f"runtime {r['url']}: [red]not answering[/] ({r['error']})")
    else:
        con.print(
            f"runtime {r['url']}: /health {r['health']}, model {r.get('model')} (max_model_len {r.get('max_model_len')}), "
            f"running {r.get('running')}, waiting {r.get('waiting')}, KV {100 * (r.get('kv_cache_usage') or 0):.1f}%, "
            f"{r.get('output_tokens_per_s')} tok/s, acceptance rate {r.get('spec_decode_acceptance_rate')}, "
            f"mean acceptance length {r.get('spec_decode_acceptance_length')}"
        )
    con.print("[green]healthy[/]" if doc["healthy"] else "[red]not healthy[/]: run `sparkctl doctor` (or `sparkctl up`)")
    raise typer.Exit(0 if doc["healthy"] else 1)
