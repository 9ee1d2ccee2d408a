"""A service sparkctl places on a host as one container from a launch it renders (the gateway on a
head, steps/gateway.py; the fleet's router on its door host, fleet/router_step.py): when that
container must start again, what that plans, and how a plan of such a step is done. Both steps
plan the same way: absent, stopped, or running another launch (its config-hash label differs) is a
start and a wait until it answers; the same launch running is nothing to do. Each keeps what is its
own: its code's shipping (runtime/code_ship.py does the copy), its start and how it answers."""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable, Optional

from sparkctl.steps.base import Change

if TYPE_CHECKING:
    from sparkctl.steps.base import Plan, RunContext

START, WAIT = "start", "wait"  # the two changes of a (re)start, as a plan names them


def restart_reason(name: str, host: str, running, want: Optional[str]) -> Optional[str]:
    """Why container `name` on `host` must (re)start for config `want` (None: it runs it).
    `running`: its ContainerFact (facts/docker.py), or None when there is none."""
    if running is None:
        return f"{name} not on {host}"
    if not running.running:
        return f"{name} on {host} is {running.status}"
    if running.config_hash != want:
        return f"{name} on {host} runs config {running.config_hash[:12] or '(none)'}"
    return None


def start_changes(
    name: str, host: str, running, want: Optional[str], start: str, port: int
) -> tuple[list[Change], Optional[str]]:
    """The (re)start of container `name` for config `want` (`start`: what the plan says it starts),
    then the wait until it answers on :`port`; with restart_reason's why. None of it when it runs
    `want` already."""
    why = restart_reason(name, host, running, want)
    if why is None:
        return [], None
    return [Change(START, start), Change(WAIT, f"wait until it answers on :{port}")], why


def apply_changes(ctx: "RunContext", plan: "Plan", actions: dict[str, Callable[["RunContext", str], str]]) -> str:
    """Each change of `plan`, in order, by the function its step gives for its action; what each did, joined."""
    return "; ".join(actions[c.action](ctx, plan.host) for c in plan.changes)
