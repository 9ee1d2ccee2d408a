"""Rule set -> the Prometheus rule file (YAML) and a scrape configuration that matches its jobs."""

from __future__ import annotations

import yaml

from sparkctl.alerts.rules import RuleSet


def rules_yaml(rs: RuleSet) -> str:
    head = (
        f"# Prometheus alerting rules for cluster {rs.cluster}, written by `sparkctl alerts`.\n"
        f"# Scrape the head's and the drafter's /metrics in job {rs.job!r} (targets labelled role=head|drafter)\n"
        f"# and a node exporter per host in job {rs.nodes_job!r} (role=head|worker|offload).\n"
    )
    return head + yaml.safe_dump(rs.to_prometheus(), sort_keys=False, width=120, allow_unicode=True)


def scrape_config(rs: RuleSet, inv, rule_files: list[str], interval: str = "5s", node_exporter_port: int = 9100,
                  nodes: bool = True) -> dict:  # fmt: skip
    """A prometheus.yml for this cluster: the runtime job, the node job and the rule files."""
    from sparkctl.runtime.launch import fabric_link_to

    head = inv.hosts_with_role("head")[0]
    runtime = [{"targets": [f"{inv.hosts[head].ssh.address}:{inv.runtime.port}"], "labels": {"role": "head"}}]
    s = inv.runtime.speculative
    if s and s.drafter_host:
        # the drafter listens where the head reaches it: its fabric address on the link to the head
        # (Prometheus must reach that network too, e.g. run on the head), else its management address
        link = fabric_link_to(inv, s.drafter_host, head)
        address = str(link.address.ip) if link else inv.hosts[s.drafter_host].ssh.address
        runtime.append({"targets": [f"{address}:{s.drafter_port}"], "labels": {"role": "drafter"}})
    jobs = [{"job_name": rs.job, "static_configs": runtime}]
    if nodes:
        jobs.append({
            "job_name": rs.nodes_job,
            "static_configs": [
                {"targets": [f"{h.ssh.address}:{node_exporter_port}"], "labels": {"role": h.role, "host": name}}
                for name, h in inv.hosts.items()
            ],
        })  # fmt: skip
    return {
        "global": {"scrape_interval": interval, "evaluation_interval": interval},
        "rule_files": rule_files,
        "scrape_configs": jobs,
    }
