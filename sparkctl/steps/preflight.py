"""Preflight step: doctor's blocking checks (SSH privilege, GPUs, disk, docker's GPU hook, the tools the
steps run) before anything changes.

It runs doctor's checks verbatim (same names, messages and fixes) on the same facts doctor reads.
It never changes anything: a failing check blocks the host, which stops `up` before the first
change; warnings are reported and pass. The playbook makes it a gate: it runs only when a later
step is about to change something, so a no-op `up` does not pay for nvidia-smi.
"""

from __future__ import annotations

from sparkctl.steps.base import Plan, RunContext, Step

# doctor checks that must pass before `up` touches anything
# (weights.present fails only where nothing places the checkpoint: no `weights` section)
BLOCKING = (
    "ssh.privilege",
    "gpu.smi",
    "gpu.model",
    "gpu.driver",
    "host.disk",
    "host.gpu_containers",
    "host.tools",
    "weights.present",
)


class PreflightStep(Step):
    name = "preflight"
    facts = frozenset({"whoami", "gpus", "disk", "tools", "weights"})

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        from sparkctl.checks import REGISTRY
        from sparkctl.checks.base import Context
        from sparkctl.checks.doctor import run_checks

        inv = ctx.inventory
        hosts = [h for h in inv.hosts if h in ctx.facts]
        results = run_checks(Context(inventory=inv, hosts=hosts, facts=ctx.facts), [REGISTRY[n] for n in BLOCKING])
        per_host: dict[str, list] = {h: [] for h in hosts}
        for r in results:
            per_host.setdefault(r.host, []).append(r)
        return {h: self._plan_host(h, rs) for h, rs in per_host.items()}

    def _plan_host(self, host: str, results: list) -> Plan:
        failed = [r for r in results if r.status == "failed"]
        if failed:
            return self.blocked(host, "; ".join(f"{r.name}: {r.message} (fix: {r.fix})" for r in failed))
        warned = [f"{r.name}: {r.message}" for r in results if r.status == "warn"]
        passed = sorted({r.name for r in results if r.status == "ok"})
        reason = f"{len(passed)} blocking check(s) ok ({', '.join(passed)})"
        return self.noop(host, reason + (f"; warnings: {'; '.join(warned)}" if warned else ""))
