"""Preflight step: doctor's blocking checks (SSH privilege, GPUs, disk) before anything changes.

It reuses doctor's probes and checks verbatim (same names, messages and fixes), gathered in the
same single round trip as every other step's facts. It never changes anything: a failing check
blocks the host, which stops `up` before the first change; warnings are reported and pass.
"""

from __future__ import annotations

import threading

from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Plan, RunContext, Step

# doctor checks that must pass before `up` touches anything, and the doctor probes they read
BLOCKING = ("ssh.privilege", "gpu.smi", "gpu.model", "gpu.driver", "host.disk")
GROUPS = ("ssh", "gpu", "host")
PROBES = ("whoami", "gpus", "disk")
SLOW = ("gpus", "disk")  # nvidia-smi and docker info: run alongside the other probes


class PreflightStep(Step):
    name = "preflight"
    description = "doctor's blocking checks: SSH privilege, GPUs, disk"
    gate = True  # only when something is about to change: a no-op `up` does not pay for nvidia-smi

    def __init__(self) -> None:
        self._lock = threading.Lock()

    def probes(self, inv: Inventory, host: str) -> dict[str, str]:
        from sparkctl.facts.host import probes_for

        return {k: v for k, v in probes_for(inv, host, GROUPS).items() if k in PROBES}

    def background(self, inv: Inventory, host: str) -> set[str]:
        return set(SLOW)

    def _results(self, ctx: RunContext) -> dict[str, list]:
        """Run the blocking checks once over every reached host (cluster checks compare them)."""
        with self._lock:
            if "preflight" not in ctx.shared:
                from sparkctl.checks import REGISTRY
                from sparkctl.checks.base import Context
                from sparkctl.checks.doctor import run_checks
                from sparkctl.facts.host import parse_host

                inv = ctx.inventory
                hosts = [h for h in inv.hosts if h in ctx.facts]
                facts = {h: parse_host(inv, h, ctx.facts[h]) for h in hosts}
                dctx = Context(inventory=inv, hosts=hosts, facts=facts)
                results = run_checks(dctx, [REGISTRY[n] for n in BLOCKING])
                per_host: dict[str, list] = {h: [] for h in hosts}
                for r in results:
                    per_host.setdefault(r.host, []).append(r)
                ctx.shared["preflight"] = per_host
            return ctx.shared["preflight"]

    def plan(self, ctx: RunContext, host: str) -> Plan:
        results = self._results(ctx).get(host, [])
        failed = [r for r in results if r.status == "fail"]
        if failed:
            return Plan(
                self.name,
                host,
                blocked="; ".join(f"{r.name}: {r.message} (fix: {r.fix})" for r in failed),
            )
        warned = [f"{r.name}: {r.message}" for r in results if r.status == "warn"]
        passed = sorted({r.name for r in results if r.status == "ok"})
        reason = f"{len(passed)} blocking check(s) ok ({', '.join(passed)})"
        return self.noop(host, reason + (f"; warnings: {'; '.join(warned)}" if warned else ""))

    def apply(self, ctx: RunContext, plan: Plan) -> str:  # never called: the plan is always empty
        return plan.reason
