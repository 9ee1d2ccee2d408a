"""A rolling change across a fleet: `sparkctl fleet reload --config-dir DIR | restart | rollback`.

The rollout is data first: `plan_rollout` reads every member's own reload plan (the check-mode run
of `sparkctl reload`: fields, containers, warm or cold, the expected start from that member's
history) and orders them as the fleet file lists the members; `--check` prints exactly that, and
`run_rollout` does exactly that, one member at a time:

    drain it at the fleet's front door (the others take the traffic)
    -> sparkctl.reload.run_reload for that member (its own lock, prestage while serving, health
       gate, throughput ratio, automatic rollback)
    -> put it back at the door (only if it serves) -> the next member.

Before a member is drained, the others must be serving at the door: never the last member that
serves, and never more members out of the door than `rollout.max_unavailable`. On a member's failure
the rollout stops (rollout.stop_on_failure): that member is left as run_reload's own rollback left
it, the rest as they are, and the report says which member runs which config.

A member's inventory file is never rewritten: after a reload it still holds the old config, and the
report names the file to replace with which (`fleet status` shows a member whose file differs).
"""

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable, Optional

from sparkctl import interrupts
from sparkctl.errors import InputError, SparkctlError
from sparkctl.reload_outcome import NOT_APPLIED, Outcome

KINDS = ("reload", "restart", "rollback")
DRAIN_WAIT = 120.0  # seconds a member's requests in flight at the door get to finish before its change
SERVE_WAIT = 60.0  # seconds the others get to be passing at the door again (after the last member's undrain)
SERVING = "passing"  # the door's state of a member it routes to


class RolloutRefused(SparkctlError):
    """The rollout cannot start or go on without leaving the fleet unserved; nothing more was changed."""

    exit_code = 1


# --- the config dir ---------------------------------------------------------------------------


def read_config_dir(fleet, config_dir: Path) -> dict[str, tuple[Path, Any]]:
    """DIR's member files: {member name: (file, its validated inventory)}. Every file must be
    `<member name>.yaml` holding that member's full new inventory, the same cluster (hosts, roles,
    addresses). Every problem in every file is named (file, line, field) in one error, exit 2,
    before any host is touched."""
    from sparkctl.inventory.loader import load_inventory
    from sparkctl.inventory.problems import InventoryError
    from sparkctl.reload import same_cluster

    config_dir = Path(config_dir)
    if not config_dir.is_dir():
        raise InputError(
            f"--config-dir {config_dir} is not a directory",
            fix="pass a directory holding <member name>.yaml for each member to change (e.g. lab.yaml)",
        )
    names = [m.name for m in fleet.members]
    problems: list[str] = []
    found: dict[str, tuple[Path, Any]] = {}
    for path in sorted(config_dir.iterdir()):
        if path.name.startswith(".") or path.suffix not in (".yaml", ".yml"):
            continue  # a README or an editor's swap file is not a member's config
        if path.suffix == ".yml":
            problems.append(f"{path}: a member's file is named <member name>.yaml (rename it {path.stem}.yaml)")
            continue
        if path.stem not in names:
            problems.append(f"{path}: names no member of fleet {fleet.name} (members: {', '.join(names)})")
            continue
        try:
            inv = load_inventory(path)
        except InventoryError as err:
            problems += [p.render(err.file) for p in err.problems if p.severity == "error"] or [err.message]
            continue
        except InputError as err:
            problems.append(f"{path}: {err.message}")
            continue
        if inv.cluster.name != path.stem:
            problems.append(
                f"{path}: cluster.name: {inv.cluster.name!r}, the file is member {path.stem}'s "
                f"(a member's file holds that member's full inventory)"
            )
            continue
        try:
            same_cluster(fleet.member(path.stem).inventory, inv)
        except InputError as err:
            problems.append(f"{path}: {err.message}")
            continue
        found[path.stem] = (path, inv)
    if problems:
        count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
        raise InputError(
            f"--config-dir {config_dir} cannot be rolled out ({count}):\n" + "\n".join(f"  {p}" for p in problems),
            fix="each file is <member name>.yaml with that member's full new inventory (docs/fleets.md); nothing was changed",
        )
    if not found:
        raise InputError(
            f"--config-dir {config_dir} holds no member's file: nothing to roll out",
            fix=f"add <member name>.yaml for each member to change ({', '.join(f'{n}.yaml' for n in names)})",
        )
    return found


# --- the plan ---------------------------------------------------------------------------------


@dataclass
class MemberPlan:
    """One member's part of the rollout: its own reload plan, or why it is left as it is."""

    member: str
    inventory_path: Path
    action: str  # change | unchanged | undrain (nothing to change, but drained at the door: put back)
    reason: Optional[str] = None  # why unchanged
    new_path: Optional[Path] = None  # reload: the member's file in DIR
    plan: Optional[Any] = None  # sparkctl.reload.ReloadPlan (check mode), None when no plan was read
    interrupted: Optional[str] = None  # an interrupted reload on the member's head
    door: Optional[str] = None  # the member's state at the front door when planned

    @property
    def expected_seconds(self) -> Optional[float]:
        return self.plan.expected_seconds if self.plan is not None and self.action == "change" else None

    @property
    def config(self) -> Optional[str]:
        """The config the member runs now (its last good, as recorded on its head)."""
        return self.plan.from_hash if self.plan is not None else None

    def headline(self) -> str:
        if self.action == "unchanged":
            return f"{self.member}: unchanged ({self.reason})"
        if self.action == "undrain":
            return f"{self.member}: nothing to change; drained at the front door: put back ({self.reason})"
        p = self.plan
        if p is None:  # a member to change always has its reload plan read
            return f"{self.member}: no plan read ({self.reason})"
        start = "no engine restart"
        if p.prediction:
            start = p.prediction + (
                f", expected ~{p.expected_seconds:.0f} s to serve"
                if p.expected_seconds
                else ", no start time in this member's history yet"
            )
        src = f" ({self.inventory_path.name} -> {self.new_path})" if self.new_path else ""
        return f"{self.member}{src}: {start}"

    def to_dict(self) -> dict:
        return {
            "member": self.member,
            "inventory": str(self.inventory_path),
            "action": self.action,
            "reason": self.reason,
            "new_config_file": str(self.new_path) if self.new_path else None,
            "config": self.config,
            "to_config": self.plan.to_hash if self.plan is not None and self.action == "change" else None,
            "prediction": self.plan.prediction if self.plan is not None and self.action == "change" else None,
            "expected_start_seconds": self.expected_seconds,
            "interrupted": self.interrupted,
            "door": self.door,
            "plan": self.plan.to_dict() if self.plan is not None else None,
        }


@dataclass
class RolloutPlan:
    fleet: str
    kind: str
    config_dir: Optional[Path]
    members: list[MemberPlan]
    max_unavailable: int
    stop_on_failure: bool
    front_door_url: str
    to: int = 0  # rollback: N configs back in each member's history
    door_note: Optional[str] = None  # the door's state could not be read while planning

    @property
    def changing(self) -> list[MemberPlan]:
        return [m for m in self.members if m.action != "unchanged"]

    @property
    def blocked(self) -> list[str]:
        """Why the run would not start: a member whose own plan would stop, or that has an
        interrupted reload a reload/restart would refuse (checked before anything is drained)."""
        out = []
        for m in self.changing:
            if m.plan is not None and m.plan.stops:
                out.append(f"{m.member}: its plan stops at {m.plan.stops}")
            if m.interrupted and self.kind != "rollback":
                out.append(f"{m.member}: {m.interrupted}: `sparkctl fleet rollback --member {m.member}` first")
        return out

    @property
    def expected_seconds(self) -> Optional[float]:
        """The members' expected starts added up (one at a time); pre-stage and drains come on top."""
        known = [m.expected_seconds for m in self.members if m.expected_seconds]
        return round(sum(known), 1) if known else None

    def lines(self) -> list[str]:
        what = {
            "reload": "reload",
            "restart": "restart of each member's recorded config",
            "rollback": "rollback to each member's last good config"
            if not self.to
            else f"rollback of each member {self.to} config(s) back in its history",
        }[self.kind]
        policy = "stop at the first member that fails" if self.stop_on_failure else "go on past a member that fails"
        out = [
            f"fleet {self.fleet}: {what}, {len(self.changing)} of {len(self.members)} member(s), one at a time, "
            f"in the fleet file's order (rollout.max_unavailable {self.max_unavailable}); {policy}",
            f"front door {self.front_door_url}: each member is drained there before its change (the others take "
            "the traffic) and put back once it serves",
        ]
        if self.door_note:
            out.append(f"front door: {self.door_note}")
        n = 0
        for m in self.members:
            if m.action == "unchanged":
                out.append(f"-  {m.headline()}" + (f"; runs config {m.config}" if m.config else ""))
                continue
            n += 1
            out.append(f"{n}. {m.headline()}")
            if m.plan is not None:
                out += [f"     {line}" for line in m.plan.lines()]
            if m.interrupted:
                out.append(f"     {m.interrupted}")
        if self.expected_seconds:
            out.append(f"expected: ~{self.expected_seconds:.0f} s of engine starts in all (pre-stage and drains come on top)")
        out += [f"the run would not start: {b}" for b in self.blocked]
        return out

    def to_dict(self) -> dict:
        return {
            "fleet": self.fleet,
            "kind": self.kind,
            "config_dir": str(self.config_dir) if self.config_dir else None,
            "to": self.to,
            "max_unavailable": self.max_unavailable,
            "stop_on_failure": self.stop_on_failure,
            "front_door_url": self.front_door_url,
            "order": [m.member for m in self.changing],
            "members": [m.to_dict() for m in self.members],
            "expected_start_seconds": self.expected_seconds,
            "blocked": self.blocked,
            "door_note": self.door_note,
        }


# How one member's plan is read: run_reload in check mode (nothing changed, no lock). A function of
# (kind, member, new inventory or None, to) -> ReloadReport, so the plan is assembled the same way
# from recorded facts in the unit tests.
MemberCheck = Callable[[str, Any, Optional[Any], int], Any]


def check_member(kind: str, member, new, to: int = 0):
    from sparkctl.reload import run_reload

    return run_reload(kind, member.inventory, new, check=True, to=to)


def plan_rollout(
    fleet,
    kind: str,
    config_dir: Optional[Path] = None,
    *,
    only: Optional[str] = None,
    to: int = 0,
    check: MemberCheck = check_member,
    door: Optional[Callable[[Any], tuple[dict[str, str], Optional[str]]]] = None,
) -> RolloutPlan:
    """The whole rollout as data: per member (in the fleet file's order) its own reload plan, or
    why it is left as it is. reload needs `config_dir` (read_config_dir: errors exit 2 before any
    host is touched); restart and rollback take every member, or `only` one. `door` reads each
    member's state at the front door (default door_states: over SSH to the door's host)."""
    if kind not in KINDS:
        raise ValueError(kind)
    if kind == "reload" and config_dir is None:
        raise InputError("fleet reload needs --config-dir DIR", fix="DIR holds <member name>.yaml for each member to change")
    if only is not None:
        fleet.member(only)  # an unknown name: exit 2 naming the members
    files = read_config_dir(fleet, config_dir) if kind == "reload" and config_dir is not None else {}

    def wanted(m) -> Optional[str]:  # why a member is left out of the rollout, or None
        if only is not None and m.name != only:
            return f"--member {only}"
        if kind == "reload" and m.name not in files:
            return f"no {m.name}.yaml in {config_dir}"
        return None

    def read(m):
        new = files[m.name][1] if m.name in files else (m.inventory if kind == "reload" else None)
        return check(kind, m, new, to if kind == "rollback" else 0)

    # every member's plan, read in parallel (each is an SSH fact read of that member's hosts); a
    # member left out is read too (reload: its own file), so the plan says which config it runs
    with ThreadPoolExecutor(max_workers=min(4, len(fleet.members))) as pool:
        reports = list(pool.map(lambda m: _read_safely(read, m), fleet.members))
    states, door_note = (door or door_states)(fleet)
    members = []
    for m, rep in zip(fleet.members, reports):
        if isinstance(rep, SparkctlError):
            if wanted(m) is None:
                raise rep.reworded(f"member {m.name}: {rep.message}")
            members.append(
                MemberPlan(
                    m.name, m.inventory_path, "unchanged", f"{wanted(m)}; its plan: {rep.message}", door=states.get(m.name)
                )
            )
            continue
        interrupted = next((n for n in rep.notes if n.startswith("an interrupted")), None)
        mp = MemberPlan(
            m.name,
            m.inventory_path,
            "change",
            plan=rep.plan,
            interrupted=interrupted,
            new_path=files[m.name][0] if m.name in files else None,
            door=states.get(m.name),
        )
        left_out = wanted(m)
        if left_out is None and rep.plan.empty and not interrupted:
            left_out = "nothing to do: " + (
                "the new config renders the recorded one" if kind == "reload" else "it runs its last good config"
            )
        if left_out is not None:
            mp.action, mp.reason = "unchanged", left_out
            if kind == "reload" and m.name not in files and not rep.plan.empty:
                mp.reason += f" (its inventory file {m.inventory_path.name} differs from the config it runs)"
            if mp.door == "drained" and only in (None, m.name):
                mp.action = "undrain"
        members.append(mp)
    return RolloutPlan(
        fleet.name,
        kind,
        Path(config_dir) if config_dir else None,
        members,
        fleet.rollout.max_unavailable,
        fleet.rollout.stop_on_failure,
        fleet.front_door_url,
        to,
        door_note,
    )


def _read_safely(read, m):
    try:
        return read(m)
    except SparkctlError as err:
        return err


def door_states(fleet) -> tuple[dict[str, str], Optional[str]]:
    """Each member's state at the front door, or ({}, why not) when the door does not answer."""
    from sparkctl.fleet import router_admin

    try:
        st = router_admin.status(fleet)
    except SparkctlError as err:
        return {}, f"its state could not be read ({err.message}); the run refuses to drain a member without it"
    return {name: s.get("state", "?") for name, s in (st.get("members") or {}).items()}, None


# --- the run ----------------------------------------------------------------------------------


@dataclass
class MemberResult:
    member: str
    # ok | rolled back | failed (nothing stopped) | rollback failed | error | unchanged | put back | not run |
    # refused | interrupted
    outcome: str
    old: Optional[str] = None  # the config it ran before
    new: Optional[str] = None  # the config the rollout took it to
    now: Optional[str] = None  # the config it runs now (its last good), None: unknown
    door: Optional[str] = None  # its state at the front door at the end: passing | drained | ...
    reason: Optional[str] = None
    replace: Optional[tuple[str, str]] = None  # (inventory file, the file that now describes the member)
    report: Optional[dict] = None  # run_reload's report

    @property
    def failed(self) -> bool:
        return self.outcome in NOT_APPLIED or self.outcome in ("error", "refused", "interrupted")

    def to_dict(self) -> dict:
        return {
            "member": self.member,
            "outcome": self.outcome,
            "old_config": self.old,
            "new_config": self.new,
            "config_now": self.now,
            "door": self.door,
            "reason": self.reason,
            "replace": {"file": self.replace[0], "with": self.replace[1]} if self.replace else None,
            "report": self.report,
        }


@dataclass
class RolloutReport:
    plan: RolloutPlan
    outcome: str = "planned"  # planned | ok | failed | interrupted
    reason: Optional[str] = None
    members: list[MemberResult] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.outcome in ("failed", "interrupted")

    def to_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "plan": self.plan.to_dict(),
            "members": [m.to_dict() for m in self.members],
            "notes": self.notes,
        }


class _Stop(Exception):
    """The rollout stops at this member (its result is recorded)."""


def run_rollout(
    fleet,
    plan: RolloutPlan,
    *,
    deadline: Optional[float] = None,
    min_ratio: Optional[float] = None,
    drain_wait: float = DRAIN_WAIT,
    serve_wait: float = SERVE_WAIT,
    say: Callable[[str, str], None] = lambda member, msg: None,
    on_result: Callable[[str, Any], None] = lambda member, r: None,
) -> RolloutReport:
    """Do exactly `plan`, one member at a time (drain, run_reload, put back). Ctrl-C, SIGTERM or
    SIGHUP stop it where it is: the report (outcome `interrupted`) says which member is left
    drained at the door, and which runs which config."""
    report = RolloutReport(plan)
    if plan.blocked:
        raise RolloutRefused("the rollout would not start: " + "; ".join(plan.blocked), fix="nothing was changed")
    from sparkctl.fleet import router_admin

    results = {m.member: _untouched(m) for m in plan.members}
    report.members = [results[m.member] for m in plan.members]
    previous = interrupts.on_termination()
    current: Optional[MemberResult] = None
    try:
        for mp in plan.members:
            if mp.action == "unchanged":
                continue
            member = fleet.member(mp.member)
            current = results[mp.member]
            if mp.action == "undrain":
                say(mp.member, "nothing to change; drained at the front door: putting it back")
                router_admin.undrain(fleet, mp.member)
                current.outcome, current.door = "put back", _door_state(fleet, mp.member)
                current = None
                continue
            try:
                _change(
                    fleet, member, mp, plan, current, router_admin, deadline, min_ratio, drain_wait, serve_wait, say, on_result
                )
            except _Stop:
                report.outcome, report.reason = "failed", f"{mp.member}: {current.outcome}: {current.reason}"
                if plan.stop_on_failure:
                    break
            current = None
        if report.outcome == "planned":
            failed = [r for r in report.members if r.failed]
            report.outcome = "failed" if failed else "ok"
            if failed:
                report.reason = "; ".join(f"{r.member}: {r.outcome}: {r.reason}" for r in failed)
    except KeyboardInterrupt as ki:
        report.outcome = "interrupted"
        report.reason = f"interrupted ({ki.args[0] if ki.args else 'Ctrl-C'})" + (
            f" during {current.member}'s change" if current else " between members"
        )
        if current is not None and current.outcome in ("draining", "changing"):
            _interrupted(fleet, current, router_admin)
    finally:
        interrupts.restore(previous)
    for r in report.members:
        if r.outcome in ("draining", "changing"):
            r.outcome = "interrupted"
    _hints(report)
    return report


def _untouched(mp: MemberPlan) -> MemberResult:
    if mp.action == "unchanged":
        return MemberResult(mp.member, "unchanged", old=mp.config, now=mp.config, door=mp.door, reason=mp.reason)
    to = mp.plan.to_hash if mp.plan is not None else None
    return MemberResult(
        mp.member, "not run", old=mp.config, new=to, now=mp.config, door=mp.door, reason="the rollout stopped before it"
    )


def _change(fleet, member, mp, plan, result, router_admin, deadline, min_ratio, drain_wait, serve_wait, say, on_result):
    """One member: wait for the others to serve at the door, drain it, run its change, put it back."""
    from sparkctl.fleet import keys
    from sparkctl.reload import run_reload

    name = mp.member
    _others_serve(fleet, name, plan.max_unavailable, serve_wait, result, router_admin, say)
    say(name, f"draining at the front door (up to {drain_wait:.0f} s for its requests in flight there)")
    result.outcome = "draining"
    try:
        keys.authorize_member(member.inventory)  # the drain reads its engine with its running config's key
        router_admin.drain(fleet, name, wait_s=drain_wait)
    except SparkctlError as err:
        put_back = _undrain_quietly(fleet, name, router_admin)
        result.outcome, result.reason = "refused", f"the front door's drain failed: {err.message}"
        result.door = put_back
        raise _Stop() from None
    result.door = "drained"  # outcome stays "draining" until run_reload confirms its plan: nothing changed yet
    say(name, f"drained; its {plan.kind} starts")
    started = threading.Event()

    def same_plan(fresh) -> bool:
        """The member's plan as run_reload reads it must be the one the rollout showed."""
        planned = mp.plan
        if (fresh.to_hash, fresh.containers) != (planned.to_hash, planned.containers):
            raise SparkctlError(
                f"{name}'s plan changed since the rollout was planned (config {planned.to_hash}, restarting "
                f"{', '.join(planned.containers) or 'nothing'}; now config {fresh.to_hash}, restarting "
                f"{', '.join(fresh.containers) or 'nothing'})",
                fix="run the rollout with --check again, then again without it",
            )
        started.set()
        result.outcome = "changing"
        return True

    new = None
    if mp.new_path is not None:
        from sparkctl.inventory.loader import load_inventory

        new = load_inventory(mp.new_path)
    try:
        rep = run_reload(
            plan.kind,
            member.inventory,
            new,
            deadline=deadline,
            min_ratio=min_ratio if plan.kind != "rollback" else None,
            to=plan.to if plan.kind == "rollback" else 0,
            confirm=same_plan,
            on_result=lambda r: on_result(name, r),
            say=lambda msg: say(name, msg),
        )
    except SparkctlError as err:
        from sparkctl.lock import LockHeld
        from sparkctl.reload import ReloadInterrupted

        result.reason = err.message
        # refused before its first change (its plan differs, its lock is held, an interrupted
        # reload): it serves as it did. Otherwise what runs is not known: put back only if it serves
        unchanged = not started.is_set() or isinstance(err, (LockHeld, ReloadInterrupted))
        result.outcome = "refused" if unchanged else "error"
        if not unchanged:
            result.now = None
        result.door = _undrain_if_serving(fleet, member.inventory, name, router_admin, say)
        raise _Stop() from None
    result.report = rep.to_dict()
    result.outcome, result.reason = rep.outcome, rep.reason
    result.old, result.new = rep.plan.from_hash, rep.plan.to_hash
    result.now = {
        Outcome.OK: rep.plan.to_hash,
        Outcome.ROLLED_BACK: rep.plan.from_hash,
        Outcome.NOTHING_STOPPED: rep.plan.from_hash,
    }.get(rep.outcome)
    if rep.outcome == Outcome.OK:
        router_admin.undrain(fleet, name)
        result.door = _door_state(fleet, name)
        say(name, f"{plan.kind} ok: runs config {rep.plan.to_hash}; back at the front door ({result.door})")
        if mp.new_path is not None:
            result.replace = (str(member.inventory_path), str(mp.new_path))
        return
    # rolled back or nothing stopped: the last good config serves again (run_reload's health gate);
    # put it back only if its engine answers (after a failed rollback it does not: it stays drained)
    result.door = _undrain_if_serving(fleet, member.inventory, name, router_admin, say)
    raise _Stop()


def drain_refusal(names: list[str], name: str, states: dict[str, str], max_unavailable: int) -> Optional[str]:
    """Why `name` may not be drained now (None: it may): it is the last member that serves at the
    door, or draining it puts more than max_unavailable members out of the door."""
    others = {n: states.get(n, "unknown") for n in names if n != name}
    serving = [n for n, s in others.items() if s == SERVING]
    out = [f"{n} ({s})" for n, s in others.items() if s != SERVING]
    if not serving:
        why = "it is the last member that serves at the front door" if others else "it is the fleet's only member"
    elif len(out) + 1 > max_unavailable:
        why = (
            f"{', '.join(out)} {'is' if len(out) == 1 else 'are'} already out of the front door "
            f"(rollout.max_unavailable {max_unavailable})"
        )
    else:
        return None
    return f"not drained: {why}" + (f"; the others: {', '.join(f'{n} {s}' for n, s in others.items())}" if others else "")


def _others_serve(fleet, name, max_unavailable, serve_wait, result, router_admin, say) -> None:
    """Wait (up to serve_wait: a member just put back takes a health check to pass) until `name`
    may be drained; refuse and stop the rollout otherwise."""
    t_end = time.monotonic() + serve_wait
    said = False
    names = [m.name for m in fleet.members]
    while True:
        try:
            st = {n: s.get("state", "?") for n, s in (router_admin.status(fleet).get("members") or {}).items()}
        except SparkctlError as err:
            result.outcome, result.reason = "refused", f"the front door's state could not be read: {err.message}"
            raise _Stop() from None
        why = drain_refusal(names, name, st, max_unavailable)
        if why is None:
            return
        if time.monotonic() >= t_end:
            result.outcome, result.reason = "refused", why
            say(
                name,
                why + "; fix: `sparkctl fleet status`, bring the others back (e.g. `sparkctl fleet restart "
                "--member NAME`), then run the rollout again",
            )
            raise _Stop()
        if not said:
            say(name, f"waiting up to {serve_wait:.0f} s for the others to serve at the front door ({why})")
            said = True
        time.sleep(1.0)


def _door_state(fleet, name: str) -> str:
    from sparkctl.fleet import router_admin

    try:
        return (router_admin.status(fleet).get("members") or {}).get(name, {}).get("state", "unknown")
    except SparkctlError:
        return "unknown"


def _undrain_quietly(fleet, name: str, router_admin) -> str:
    try:
        router_admin.undrain(fleet, name)
    except SparkctlError:
        return "drained?"
    return _door_state(fleet, name)


def _serves(inv) -> bool:
    from sparkctl import httpclient
    from sparkctl.runtime.health import base_url, health

    with httpclient.client(trust_env=False) as client:
        return health(client, base_url(inv)) == 200


def _undrain_if_serving(fleet, inv, name: str, router_admin, say) -> str:
    if _serves(inv):
        state = _undrain_quietly(fleet, name, router_admin)
        say(name, f"serves its last good config again: back at the front door ({state})")
        return state
    say(
        name,
        "does not serve: left drained at the front door (see its `sparkctl history`; `sparkctl fleet rollback "
        f"--member {name}` or `sparkctl up -i {fleet.member(name).inventory_path}` brings it back)",
    )
    return "drained"


def _interrupted(fleet, result: MemberResult, router_admin) -> None:
    """Ctrl-C during a member's drain or change: a drain not yet followed by a change is undone;
    a member whose change began stays drained (its run_reload released its lock and kept its
    journal: `fleet rollback --member` finishes it)."""
    if result.outcome == "draining":
        result.door = _undrain_quietly(fleet, result.member, router_admin)
        result.reason = (
            "interrupted while draining it at the front door: put back"
            if result.door != "drained?"
            else (
                "interrupted while draining it: it may be drained at the front door (`sparkctl fleet rollback --member "
                f"{result.member}` puts it back)"
            )
        )
    elif result.outcome == "changing":
        result.door = "drained"
        result.now = None
        result.reason = (
            "interrupted during its change: left drained at the front door; `sparkctl fleet rollback "
            f"--member {result.member}` finishes it and puts it back"
        )
    result.outcome = "interrupted"


def _hints(report: RolloutReport) -> None:
    """What the operator does next: the files to replace, and how to undo the members that took
    a change when a later one failed."""
    took = [r for r in report.members if r.outcome == "ok" and r.replace]
    for r in took:
        if r.replace is not None:
            inventory_file, now = r.replace
            report.notes.append(
                f"{r.member} runs {r.new}; its inventory file still holds {r.old}: replace it (`cp {now} {inventory_file}`)"
            )
    if report.failed and took:
        names = ", ".join(r.member for r in took)
        report.notes.append(
            f"{names} keep the new config; to undo: `sparkctl fleet rollback --to 1 --member NAME` for each "
            "(or a `fleet reload --config-dir` holding their old files)"
        )


# --- a member a killed run left drained ---------------------------------------------------------


def put_back_drained(fleet, say: Callable[[str, str], None] = lambda member, msg: None, check: bool = False) -> dict[str, str]:
    """Each member drained at the front door that serves and that no run is changing (no cluster
    lock, no reload journal on its head) is put back: what a rollout killed outright (SIGKILL, the
    control machine lost) leaves behind. For `fleet up`, after the door (with check: what it would
    do). Returns {member: what was done or why not}; a door that does not answer is said, nothing
    else done."""
    from sparkctl.fleet import router_admin
    from sparkctl.lock import read_holder
    from sparkctl.session import ClusterSession

    try:
        states = {n: s.get("state") for n, s in (router_admin.status(fleet).get("members") or {}).items()}
    except SparkctlError as err:
        return {"front door": f"not read ({err.message}): a member left drained there stays so"}
    done: dict[str, str] = {}
    for name, state in states.items():
        if state != "drained" or name not in {m.name for m in fleet.members}:
            continue
        member = fleet.member(name)
        try:
            with ClusterSession(member.inventory, [member.head]) as cluster:
                busy = read_holder(cluster[member.head]) is not None
                journal = cluster.read(member.head, {"journal"}).journal
        except SparkctlError as err:
            done[name] = f"left drained: its head does not answer ({err.message})"
            continue
        if busy or journal:
            done[name] = (
                "left drained: a run holds its cluster lock"
                if busy
                else "left drained: an interrupted reload on its head (`sparkctl fleet rollback --member "
                f"{name}` finishes it and puts it back)"
            )
        elif not _serves(member.inventory):
            done[name] = "left drained: its engine does not serve"
        elif check:
            done[name] = "would put it back at the front door: a killed rollout left it drained"
        else:
            state_now = _undrain_quietly(fleet, name, router_admin)
            done[name] = f"put back at the front door ({state_now}): a killed rollout had left it drained"
        say(name, done[name])
    return done
