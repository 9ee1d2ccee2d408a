"""The runner: a playbook's steps in order, hosts in parallel, one result per host and step.

The playbook (playbooks/<name>.yaml) is data that drives the run: the steps' order, which step is
a gate, which applies host after host, and per-step options. The runner owns concurrency and
results (steps never print):
1. facts: the fact kinds every step declares are gathered in ONE round trip per host, all hosts
   at once, through the run's cluster session (sparkctl/session.py), and shared by all steps (a
   step re-reads only what it changed);
2. per step: plan the cluster (pure), then (unless --check) apply exactly the planned operations,
   in parallel or in the step's host order, then let the step verify what it changed;
3. a gate (preflight) runs only once something is about to change, just before the first change,
   with one more round trip: a no-op run does not pay for it;
4. the first failed step stops the run: later steps are reported skipped, with why.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Callable, Literal, Optional, get_args

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from sparkctl.errors import InputError, SparkctlError
from sparkctl.steps.base import Plan, RunContext, Status, Step, StepOptions, StepResult

if TYPE_CHECKING:
    from sparkctl.session import Unreachable


CONNECT = "connect"  # the pseudo-step hosts fail when their facts could not be read over SSH
FIX_CONNECT = "check SSH: `sparkctl doctor --only ssh`"  # when the transport's error names no fix


# the phases a reload journals its steps under, in order (reload.py Journal; docs/reload.md)
JournalPhase = Literal["prestage", "drain", "restart", "verify", "commit"]


class PlaybookStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    step: str = Field(description="the step's name (sparkctl/steps/registry.py)")
    gate: bool = Field(False, description="run only when a later step is about to change something")
    in_order: bool = Field(False, description="apply host after host in the step's order; a failure stops the rest")
    first_alone: bool = Field(
        False,
        description="apply the step's first host alone, then all the others at once (a download, then the copies "
        "from it); the first's failure stops the rest",
    )
    options: StepOptions = Field(default_factory=StepOptions, description="options the step reads")
    phase: Optional[JournalPhase] = Field(
        None, description="the reload journal's phase this step belongs to (a playbook reload.py runs names one per step)"
    )

    @model_validator(mode="after")
    def _one_host_order(self) -> PlaybookStep:
        # the runner could honour only one of them: refused rather than one silently winning
        if self.in_order and self.first_alone:
            raise ValueError(
                "in_order and first_alone exclude each other (in_order: host after host; first_alone: the first "
                "host alone, then the others at once): keep one"
            )
        return self


class Playbook(BaseModel):
    model_config = ConfigDict(extra="forbid")

    name: str
    steps: list[PlaybookStep]


def load_playbook(name: str) -> Playbook:
    """playbooks/<name>.yaml, shipped inside the package (read with importlib.resources)."""
    from sparkctl.resources import names, read_text

    text = read_text("playbooks", f"{name}.yaml")
    if text is None:
        raise InputError(f"no playbook {name!r}", fix=f"playbooks: {', '.join(n[:-5] for n in names('playbooks', '.yaml'))}")
    return parse_playbook(name, text)


def parse_playbook(name: str, text: str) -> Playbook:
    """A playbook's YAML text; an InputError naming the entry (its index and step) that is wrong."""
    import yaml

    fix = "see the comment at the top of playbooks/up.yaml"
    try:
        doc = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise InputError(f"playbook {name!r} is not YAML: {exc}".splitlines()[0], fix=fix) from None
    try:
        return Playbook.model_validate(doc)
    except ValidationError as exc:
        first = exc.errors()[0]
        loc = first["loc"]
        where = ".".join(map(str, loc)) or "the playbook"
        if len(loc) >= 2 and loc[0] == "steps" and isinstance(loc[1], int):
            entry = doc["steps"][loc[1]]
            step = entry.get("step") if isinstance(entry, dict) else None
            where = f"steps[{loc[1]}]" + (f" (step {step})" if step else "") + "".join(f".{p}" for p in loc[2:])
        message = first["msg"].removeprefix("Value error, ")
        if first["type"] == "extra_forbidden":  # pydantic's "Extra inputs are not permitted"
            known = StepOptions.model_fields if "options" in loc else PlaybookStep.model_fields
            message = f"unknown; expected one of: {', '.join(known)}"
        raise InputError(f"playbook {name!r} is malformed: {where}: {message}", fix=fix) from None


@dataclass
class Stage:
    """One playbook entry bound to the step object that implements it (the step reads the entry's options)."""

    spec: PlaybookStep
    step: Step

    def __post_init__(self) -> None:
        self.step.options = self.spec.options

    @property
    def name(self) -> str:
        return self.step.name


@dataclass
class Recap:
    playbook: str
    check_mode: bool
    steps: list[str] = field(default_factory=list)  # playbook order, for the recap's columns
    results: list[StepResult] = field(default_factory=list)
    plans: list[Plan] = field(default_factory=list)
    seconds: float = 0.0
    stopped_at: Optional[str] = None

    def count(self, status: Status) -> int:
        return [r.status for r in self.results].count(status)

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
            **{status: self.count(status) for status in get_args(Status)},
            "stopped_at": self.stopped_at,
            "seconds": round(self.seconds, 3),
            "hosts": hosts,
            "results": [r.to_dict() for r in self.results],
            "plans": [p.to_dict() for p in self.plans],
        }


def build_stages(playbook: Playbook) -> list[Stage]:
    from sparkctl.steps.registry import step_classes

    classes = step_classes()
    unknown = [s.step for s in playbook.steps if s.step not in classes]
    if unknown:
        raise InputError(
            f"playbook {playbook.name!r} names unknown step(s): {', '.join(unknown)}", fix=f"known steps: {', '.join(classes)}"
        )
    return [Stage(spec, classes[spec.step]()) for spec in playbook.steps]


def _reached(ctx: RunContext, stage: Stage) -> list[str]:
    return [h for h in stage.step.hosts(ctx.inventory) if h in ctx.sessions.sessions]


def gather_facts(ctx: RunContext, stages: list[Stage], extra: Optional[dict[str, set[str]]] = None) -> dict[str, Unreachable]:
    """One round trip per host with the stages' fact kinds not read yet (and `extra` kinds per
    host), through the run's cluster session; returns the hosts asked that could not be read."""
    kinds: dict[str, set[str]] = {h: set((extra or {}).get(h, ())) for h in ctx.sessions.sessions}
    for stage in stages:
        for host in _reached(ctx, stage):
            kinds[host] |= set(stage.step.facts)
    ctx.cluster.need(kinds)
    return {h: u for h, u in ctx.cluster.unreachable.items() if kinds.get(h)}


def compensate(ctx: RunContext, stages: list[Stage]) -> list[str]:
    """A failed run with no run after it to set things right (the command decides: `up`'s failed
    run, a reload with no rollback to come or whose rollback failed): each step's compensating
    action (Step.compensate: the stop step releases the gateway's hold), last step first. The
    notes an operator reads."""
    notes = [stage.step.compensate(ctx) for stage in reversed(stages)]
    return [n for n in notes if n]


class _LockFirst(Exception):
    """Raised by a run without the cluster lock when it must take it: a change is planned, or
    another run holds it. The run starts again under the lock, from fresh facts."""


def run_playbook(
    ctx: RunContext,
    stages: list[Stage],
    playbook: str,
    on_result: Callable[[StepResult], None] = lambda r: None,
) -> Recap:
    """Run the stages. With a lock not yet taken (`ctx.lock`, lazy), the run first plans without
    it, reading the lock on the head in the same round trip: when nothing is to change and nobody
    holds it, that is the whole run (no lock written, no extra round trip). Otherwise it takes the
    lock (or is refused, or waits, naming the holder) and runs again from fresh facts, because
    what it planned from may have changed before it held the lock."""
    lock = ctx.lock
    if lock is None or lock.held or ctx.check_mode:
        return _run(ctx, stages, playbook, on_result)
    held_back: list[StepResult] = []  # shown only if this pass is the run
    try:
        recap = _run(ctx, stages, playbook, held_back.append, lock_free=True)
    except _LockFirst:
        lock.take()
        ctx.cluster.forget()
        ctx.outputs = type(ctx.outputs)()
        return _run(ctx, stages, playbook, on_result, prepare=False)
    for r in held_back:
        on_result(r)
    return recap


def _run(
    ctx: RunContext,
    stages: list[Stage],
    playbook: str,
    on_result: Callable[[StepResult], None],
    prepare: bool = True,
    lock_free: bool = False,
) -> Recap:
    start = time.monotonic()
    recap = Recap(playbook=playbook, check_mode=ctx.check_mode, steps=[s.name for s in stages])

    def emit(r: StepResult) -> None:
        recap.results.append(r)
        on_result(r)

    def emit_reached(stage: Stage, status: Status, message: str, **extra) -> None:
        """The same result for every host of the stage whose facts were read."""
        for h in _reached(ctx, stage):
            if h not in unreachable:
                emit(StepResult(stage.name, h, status, message, **extra))

    def plan_stage(stage: Stage) -> tuple[dict[str, Plan], bool]:
        """Plan the cluster, or fail every host it covers; validate everything before touching any host."""
        failed = False
        for h in _reached(ctx, stage):
            if h in unreachable:
                u = unreachable[h]
                emit(StepResult(stage.name, h, "failed", u.message, fix=u.fix or FIX_CONNECT))
                failed = True
        t0 = time.monotonic()
        try:
            plans = stage.step.plan(ctx)
        except SparkctlError as exc:
            emit_reached(stage, "failed", exc.message, seconds=time.monotonic() - t0, fix=exc.fix)
            return {}, False
        recap.plans += plans.values()
        for h, plan in plans.items():
            if plan.blocked:
                emit(StepResult(stage.name, h, "failed", plan.blocked))
                failed = True
        if failed:
            for h, plan in plans.items():
                if not plan.blocked:
                    emit(StepResult(stage.name, h, "skipped", "not applied: another host failed this step's plan"))
        return plans, not failed

    def open_gates() -> bool:
        while pending_gates:
            gate = pending_gates.pop(0)
            ctx.progress("all", gate.name, "checking before the first change")
            unreachable.update(gather_facts(ctx, [gate]))
            plans, ok = plan_stage(gate)
            ctx.progress("all", gate.name, "done")
            if not ok:
                recap.stopped_at = gate.name
                return False
            for h, plan in plans.items():
                emit(StepResult(gate.name, h, "ok", plan.reason))
        return True

    pending_gates = [s for s in stages if s.spec.gate]
    preparing = _prepare(ctx, stages) if prepare else []  # e.g. a registry lookup, during the facts round trip
    head = ctx.inventory.hosts_with_role("head")[0]
    unreachable = gather_facts(ctx, [s for s in stages if not s.spec.gate], extra={head: {"lock"}} if lock_free else None)
    _joined(preparing)
    if lock_free and head in ctx.facts and (ctx.facts[head].lock is not None or "lock" in ctx.facts[head].errors):
        raise _LockFirst  # another run holds it (or held it and is gone): refused, or --wait, by the lock
    if unreachable:  # SSH (connect, host key, auth, deadline) failed: named as such, before any step
        recap.steps.insert(0, CONNECT)
        for h, u in unreachable.items():
            emit(StepResult(CONNECT, h, "failed", u.message, fix=u.fix or FIX_CONNECT))
        recap.stopped_at = CONNECT
    for stage in stages:
        if stage.spec.gate:
            continue
        if recap.stopped_at:
            emit_reached(stage, "skipped", f"not run: step {recap.stopped_at!r} failed")
            continue
        plans, ok = plan_stage(stage)
        if not ok:
            recap.stopped_at = stage.name
            continue
        changing = any(not p.empty for p in plans.values())
        if lock_free and changing:
            raise _LockFirst
        if changing and not open_gates():
            for h in plans:
                emit(StepResult(stage.name, h, "skipped", f"not applied: step {recap.stopped_at!r} failed"))
            continue
        results = _apply_all(ctx, stage, plans)
        for r in results:
            emit(r)
        if any(r.status == "failed" for r in results):
            recap.stopped_at = stage.name
    for gate in pending_gates:  # never needed: nothing was about to change
        why = f"not run: step {recap.stopped_at!r} failed" if recap.stopped_at else "not needed: nothing to change"
        emit_reached(gate, "skipped", why)
    recap.seconds = time.monotonic() - start
    return recap


def _prepare(ctx: RunContext, stages: list[Stage]) -> list:
    """Start each step's `prepare` (work that needs no host facts) in a thread of its own. An error
    there is the step's to report when it plans, except bad input (InputError, e.g. an image on a
    registry the network fence refuses): `_joined` raises it before any step, nothing touched."""
    import threading

    threads = []
    for stage in stages:
        if type(stage.step).prepare is not Step.prepare:
            step, errors = stage.step, list[InputError]()

            def run(step=step, errors=errors) -> None:
                try:
                    step.prepare(ctx)
                except InputError as exc:
                    errors.append(exc)
                except Exception:  # noqa: BLE001 - the step meets it again when it plans, and reports it there
                    pass

            t = threading.Thread(target=run, name=f"sparkctl-prepare-{stage.name}", daemon=True)
            t.start()
            threads.append((t, errors))
    return threads


def _joined(preparing: list) -> None:
    from sparkctl import waits

    for t, errors in preparing:
        waits.join(t)
        if errors:
            raise errors[0]


def _apply_all(ctx: RunContext, stage: Stage, plans: dict[str, Plan]) -> list[StepResult]:
    """Apply every host's plan (in parallel, or in order), THEN verify each host: a proof such as
    a jumbo ping must not run while the peer is still being configured."""
    step = stage.step
    any_change = any(not p.empty for p in plans.values())
    names = list(plans)
    results: dict[str, StepResult] = {}

    def guarded(host: str, fn: Callable[[str], StepResult]) -> StepResult:
        t0 = time.monotonic()
        try:
            r = fn(host)
        except Exception as exc:  # a library's error: sparkctl's words for it, per host, never a traceback
            if isinstance(exc, SparkctlError):
                err = exc
            elif ctx.fleet is not None and ctx.fleet.sessions.get(host) is not None:
                err = ctx.session(host).explain(exc)
            else:
                err = SparkctlError(f"{type(exc).__name__}: {exc}")
            r = StepResult(step.name, host, "failed", err.message, fix=err.fix, operations=operations(host))
        r.seconds += time.monotonic() - t0
        return r

    def operations(host: str) -> list[str]:
        return [c.action for c in plans[host].changes]

    def apply_one(host: str) -> StepResult:
        plan = plans[host]
        changes = [c.summary for c in plan.changes]
        ops = operations(host)
        if plan.empty:
            return StepResult(step.name, host, "ok", plan.reason)
        if ctx.check_mode:
            return StepResult(step.name, host, "changed", f"would: {plan.reason}", changes, operations=ops)
        ctx.progress(host, step.name, plan.reason)
        out = step.apply(ctx, plan)
        # apply may report that nothing really changed (e.g. a pull of an image already current)
        message, did_change = out if isinstance(out, tuple) else (out, True)
        return StepResult(
            step.name, host, "changed" if did_change else "ok", message, changes if did_change else [], operations=ops
        )

    def verify_one(host: str) -> StepResult:
        r = results[host]
        proof = step.verify(ctx, host, any_change)
        r.message = f"{r.message}; {proof}" if r.message else proof
        return r

    def run_phase(fn: Callable[[str], StepResult], hosts: list[str], in_order: bool, first_alone: bool = False) -> None:
        if in_order or first_alone or len(hosts) <= 1:
            alone = hosts if in_order else hosts[:1]
            for i, h in enumerate(alone):
                results[h] = guarded(h, fn)
                if results[h].status == "failed":
                    for n in hosts[i + 1 :]:
                        results[n] = StepResult(step.name, n, "skipped", f"not run: {h} failed")
                    return
            hosts = hosts[len(alone) :]
            if not hosts:
                return
        from concurrent.futures import ThreadPoolExecutor

        with ThreadPoolExecutor(max_workers=len(hosts)) as pool:
            results.update(zip(hosts, pool.map(lambda h: guarded(h, fn), hosts)))

    run_phase(apply_one, names, stage.spec.in_order, stage.spec.first_alone)
    if not ctx.check_mode and type(step).verify is not Step.verify:
        run_phase(verify_one, [h for h in names if results[h].status in ("ok", "changed")], False)
    return [results[h] for h in names]
