"""Rule set -> the Prometheus rule file (YAML) and a scrape configuration that matches its jobs."""

from __future__ import annotations

import yaml

from sparkctl.alerts.rules import RuleSet


def rules_yaml(rs: RuleSet) -> str:
    head = (
        f"# Prometheus alerting rules for cluster {rs.cluster}, written by `sparkctl alerts`.\n"
        f"# Scrape the head's and the drafter's /metrics and the gateway's /gateway/metrics in job {rs.job!r}\n"
        "# (targets labelled role=head|drafter|gateway)\n"
        f"# and a node exporter per host in job {rs.nodes_job!r} (role=head|worker|offload).\n"
    )
    return head + yaml.safe_dump(rs.to_prometheus(), sort_keys=False, width=120, allow_unicode=True)


NODE_EXPORTER_PORT = 9100


def key_file(rs: RuleSet) -> str:
    """Where Prometheus reads the key it sends (one key of the cluster's, root-only on the Prometheus host)."""
    return f"/etc/prometheus/sparkctl-{rs.cluster}.key"


def scrape_config(rs: RuleSet, inv, rule_files: list[str]) -> dict:
    """A prometheus.yml for this cluster: the runtime job, the node job and the rule files."""
    from sparkctl.launch.endpoints import engine_endpoint, fabric_ip
    from sparkctl.launch.gateway import METRICS_PATH
    from sparkctl.transport.api_key import asks_key

    head = inv.hosts_with_role("head")[0]
    # the engine's own /metrics: behind a gateway (the engine on the head's loopback) through its
    # engine route, which never holds; a key-protected cluster's job needs `authorization` (docs/gateway.md)
    address, port, path = engine_endpoint(inv)
    runtime = [
        {
            "targets": [f"{address}:{port}"],
            "labels": {"role": "head", **({"__metrics_path__": f"{path}/metrics"} if path else {})},
        }
    ]
    if inv.gateway.enabled:  # the gateway's own page on the public port (it answers even while holding)
        runtime.append(
            {"targets": [f"{address}:{inv.runtime.port}"], "labels": {"role": "gateway", "__metrics_path__": METRICS_PATH}}
        )
    s = inv.runtime.speculative
    if s and s.drafter_host:
        # the drafter listens where the head reaches it: its fabric address on the link to the head
        # (Prometheus must reach that network too, e.g. run on the head), else its management address
        address = fabric_ip(inv, s.drafter_host, head)
        runtime.append({"targets": [f"{address}:{s.drafter_port}"], "labels": {"role": "drafter"}})
    nodes = [
        {"targets": [f"{h.ssh.address}:{NODE_EXPORTER_PORT}"], "labels": {"role": h.role, "host": name}}
        for name, h in inv.hosts.items()
    ]
    job: dict = {"job_name": rs.job, "static_configs": runtime}
    if asks_key(inv):  # the front door asks a key of Prometheus too (docs/gateway.md "Security")
        job["authorization"] = {"type": "Bearer", "credentials_file": key_file(rs)}
    return {
        "global": {"scrape_interval": "5s", "evaluation_interval": "5s"},
        "rule_files": rule_files,
        "scrape_configs": [
            job,
            {"job_name": rs.nodes_job, "static_configs": nodes},
        ],
    }
