"""The runner: a playbook's steps in order, hosts in parallel, one result per host and step.

It owns concurrency and results (steps never print):
1. facts: every step's probes for a host are gathered in ONE round trip, all hosts at once;
2. per step: plan every host (pure), then (unless --check) apply only non-empty plans, in
   parallel or in the step's order, then let the step verify what it changed;
3. the first failed step stops the run: later steps are reported skipped, with why.
"""

from __future__ import annotations

import dataclasses
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable, Optional

from sparkctl.errors import InputError, SparkctlError
from sparkctl.steps.base import Plan, RunContext, Step, StepResult

PLAYBOOKS_DIR = Path(__file__).resolve().parent.parent / "playbooks"


@dataclass
class Recap:
    playbook: str
    check_mode: bool
    steps: list[str] = field(default_factory=list)  # playbook order, for the recap's columns
    results: list[StepResult] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    seconds: float = 0.0
    stopped_at: Optional[str] = None

    def count(self, status: str) -> int:
        return sum(1 for r in self.results if r.status == status)

    @property
    def failed(self) -> bool:
        return self.count("failed") > 0

    def to_dict(self) -> dict:
        hosts: dict[str, dict] = {}
        for r in self.results:
            hosts.setdefault(r.host, {})[r.step] = r.to_dict()
        return {
            "playbook": self.playbook,
            "check": self.check_mode,
            "ok": self.count("ok"),
            "changed": self.count("changed"),
            "failed": self.count("failed"),
            "skipped": self.count("skipped"),
            "stopped_at": self.stopped_at,
            "seconds": round(self.seconds, 3),
            "hosts": hosts,
            "results": [r.to_dict() for r in self.results],
        }


def load_playbook(name: str) -> list[str]:
    """Step names in order from playbooks/<name>.yaml (data an on-call engineer can read)."""
    import yaml

    path = PLAYBOOKS_DIR / f"{name}.yaml"
    if not path.exists():
        raise InputError(f"no playbook {name!r} in {PLAYBOOKS_DIR}")
    doc = yaml.safe_load(path.read_text())
    steps = doc.get("steps") if isinstance(doc, dict) else None
    if not isinstance(steps, list) or not all(isinstance(s, str) for s in steps):
        raise InputError(f"{path}: `steps` must be a list of step names")
    return steps


def gather_facts(ctx: RunContext, steps: list[Step]) -> dict[str, tuple[str, Optional[str]]]:
    """One round trip per host with every step's probes; returns per-host (error, fix) for hosts that failed."""
    from sparkctl.facts.probe import gather

    per_host: dict[str, dict[str, str]] = {h: {} for h in ctx.fleet.sessions}
    background: dict[str, set[str]] = {h: set() for h in ctx.fleet.sessions}
    for step in steps:
        for host in step.hosts(ctx.inventory):
            if host in per_host:
                per_host[host].update({f"{step.name}.{k}": v for k, v in step.probes(ctx.inventory, host).items()})
                background[host] |= {f"{step.name}.{k}" for k in step.background(ctx.inventory, host)}
    out = ctx.fleet.map(lambda s: gather(s, per_host[s.name], background=background[s.name]) if per_host[s.name] else {})
    errors = {}
    for host, outcome in out.items():
        if outcome.ok:
            ctx.facts.setdefault(host, {}).update(outcome.value)
        else:
            errors[host] = (outcome.error, outcome.fix)
    return errors


def run_playbook(
    ctx: RunContext,
    steps: list[Step],
    playbook: str,
    on_result: Callable[[StepResult], None] = lambda r: None,
) -> Recap:
    """Run the steps in order. Gate steps (preflight) run only once something is about to change,
    just before the first change, with one more round trip: a no-op run does not pay for them."""
    start = time.monotonic()
    recap = Recap(playbook=playbook, check_mode=ctx.check_mode, steps=[s.name for s in steps])

    def emit(r: StepResult) -> None:
        recap.results.append(r)
        on_result(r)

    def stop(step: Step) -> None:
        nonlocal failed_step
        failed_step = recap.stopped_at = step.name

    def plan_step(step: Step) -> tuple[RunContext, dict[str, Plan], bool]:
        """Plan every host; validate everything before touching any host."""
        hosts = [h for h in step.hosts(ctx.inventory) if h in ctx.fleet.sessions]
        view = _scoped(ctx, step)
        plans: dict[str, Plan] = {}
        failed = False
        for h in hosts:
            if h in unreachable:
                error, fix = unreachable[h]
                emit(StepResult(step.name, h, "failed", error, fix=fix or "check SSH: `sparkctl doctor --only ssh`"))
                failed = True
                continue
            t0 = time.monotonic()
            try:
                plans[h] = step.plan(view, h)
            except SparkctlError as exc:
                emit(StepResult(step.name, h, "failed", exc.message, seconds=time.monotonic() - t0, fix=exc.fix))
                failed = True
        for h, plan in plans.items():
            recap.plans.append(plan)
            if plan.blocked:
                emit(StepResult(step.name, h, "failed", plan.blocked))
                failed = True
        if failed:
            for h, plan in plans.items():
                if not plan.blocked:
                    emit(StepResult(step.name, h, "skipped", "not applied: another host failed this step's plan"))
        return view, plans, not failed

    def open_gates() -> bool:
        while pending_gates:
            gate = pending_gates.pop(0)
            ctx.progress("all", gate.name, "checking before the first change")
            unreachable.update(gather_facts(ctx, [gate]))
            _, plans, ok = plan_step(gate)
            if not ok:
                stop(gate)
                return False
            for h, plan in plans.items():
                emit(StepResult(gate.name, h, "ok", plan.reason))
        return True

    failed_step: Optional[str] = None
    pending_gates = [s for s in steps if s.gate]
    unreachable = gather_facts(ctx, [s for s in steps if not s.gate])
    for step in steps:
        if step.gate:
            continue
        hosts = [h for h in step.hosts(ctx.inventory) if h in ctx.fleet.sessions]
        if failed_step:
            for h in hosts:
                emit(StepResult(step.name, h, "skipped", f"not run: step {failed_step!r} failed"))
            continue
        view, plans, ok = plan_step(step)
        if not ok:
            stop(step)
            continue
        if any(not p.empty for p in plans.values()) and not open_gates():
            for h in hosts:
                emit(StepResult(step.name, h, "skipped", f"not applied: step {failed_step!r} failed"))
            continue
        results = _apply_all(view, step, plans)
        for r in results:
            emit(r)
        if any(r.status == "failed" for r in results):
            stop(step)
    for gate in pending_gates:  # never needed: nothing was about to change
        why = f"not run: step {failed_step!r} failed" if failed_step else "not needed: nothing to change"
        for h in gate.hosts(ctx.inventory):
            if h in ctx.fleet.sessions:
                emit(StepResult(gate.name, h, "skipped", why))
    recap.seconds = time.monotonic() - start
    return recap


def _scoped(ctx: RunContext, step: Step) -> RunContext:
    """The context as one step sees it: its own probes under their short keys (same shared dict)."""
    prefix = f"{step.name}."
    facts = {
        h: {k[len(prefix) :]: v for k, v in secs.items() if k.startswith(prefix)} for h, secs in ctx.facts.items()
    }
    return dataclasses.replace(ctx, facts=facts)


def _apply_all(ctx: RunContext, step: Step, plans: dict[str, Plan]) -> list[StepResult]:
    """Apply every host's plan (in parallel, or in order for sequential steps), THEN verify each
    host: a proof such as a jumbo ping must not run while the peer is still being configured."""
    any_change = any(not p.empty for p in plans.values())
    names = list(plans)
    results: dict[str, StepResult] = {}

    def guarded(host: str, fn: Callable[[], StepResult]) -> StepResult:
        t0 = time.monotonic()
        try:
            r = fn()
        except SparkctlError as exc:
            r = StepResult(step.name, host, "failed", exc.message, fix=exc.fix)
        except Exception as exc:  # unexpected: still a per-host failure, never a traceback
            r = StepResult(step.name, host, "failed", f"{type(exc).__name__}: {exc}")
        r.seconds += time.monotonic() - t0
        return r

    def apply_one(host: str) -> StepResult:
        plan = plans[host]
        changes = [c.summary for c in plan.changes]
        if ctx.check_mode:
            if plan.empty:
                return StepResult(step.name, host, "ok", plan.reason)
            return StepResult(step.name, host, "changed", f"would: {plan.reason}", changes)
        if plan.empty:
            return StepResult(step.name, host, "ok", plan.reason)
        ctx.progress(host, step.name, plan.reason)
        out = step.apply(ctx, plan)
        # apply may report that nothing really changed (e.g. a pull of an image already current)
        message, did_change = out if isinstance(out, tuple) else (out, True)
        return StepResult(step.name, host, "changed" if did_change else "ok", message, changes if did_change else [])

    def verify_one(host: str) -> StepResult:
        r = results[host]
        proof = step.verify(ctx, host, any_change)
        r.message = f"{r.message}; {proof}" if r.message else proof
        return r

    def run_phase(fn: Callable[[str], StepResult], hosts: list[str], in_order: bool) -> None:
        if in_order or len(hosts) <= 1:
            for i, h in enumerate(hosts):
                results[h] = guarded(h, lambda: fn(h))
                if results[h].status == "failed":
                    for n in hosts[i + 1 :]:
                        results[n] = StepResult(step.name, n, "skipped", f"not run: {h} failed")
                    return
            return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            for h, r in zip(hosts, pool.map(lambda h: guarded(h, lambda: fn(h)), hosts)):
                results[h] = r

    run_phase(apply_one, names, step.sequential)
    if not ctx.check_mode and hasattr(step, "verify"):
        run_phase(verify_one, [h for h in names if results[h].status in ("ok", "changed")], False)
    return [results[h] for h in names]
