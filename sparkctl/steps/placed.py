"""A service sparkctl places on a host as one container from a launch it renders (the gateway on a
head, steps/gateway.py; the fleet's router on its door host, fleet/router_step.py): when that
container must start again. Both steps plan the same way: absent, stopped, or running another
launch (its config-hash label differs) is a start; the same launch running is nothing to do."""

from __future__ import annotations

from typing import Optional


def restart_reason(name: str, host: str, running, want: str) -> Optional[str]:
    """Why container `name` on `host` must (re)start for config `want` (None: it runs it).
    `running`: its ContainerFact (facts/docker.py), or None when there is none."""
    if running is None:
        return f"{name} not on {host}"
    if not running.running:
        return f"{name} on {host} is {running.status}"
    if running.config_hash != want:
        return f"{name} on {host} runs config {running.config_hash[:12] or '(none)'}"
    return None
