"""Change a serving cluster safely: `sparkctl reload --config NEW`, `restart`, `rollback`.

vLLM has no partial reload: a config change restarts the engine (head + workers), and in the
DSpark recipe (seed 002) that costs 10-15 minutes when kernels recompile. The flow, each phase
journaled on the head as it happens (state.JOURNAL), the whole timeline in --json:

1. validate   NEW fully, and against the cluster (same hosts and roles) before any host is touched;
2. plan       the reload playbook run in check mode: every step's own plan, so what restarts
              (engine and/or drafter) is what the runtime step would start, and --check is the
              run; plus the field-by-field diff of the recorded (last good) config vs NEW, and
              warm or cold from the fields vLLM's compile hash covers, with the expected time
              from this cluster's history; --check stops here. The run takes the cluster lock the
              way every changing command does (lock.cluster_lock) and restarts only what the plan
              named (the stop step refuses, nothing stopped, if the cluster changed since);
3. prestage   fabric, images, caches and Engram for NEW while the old config serves;
4. drain      only the changing groups, head first, with the runtime's shutdown timeout; the
              head's in-flight requests counted (finished, cut) from vLLM's own shutdown lines;
5. restart    in order, health-gated with --deadline, smoke completion, and with
              --min-throughput-ratio a decode measurement against the last recorded one;
6. commit     NEW becomes last good; or, on any failure from step 4 on, roll back to the last
              good config (itself health-gated) and exit 1 with the reason. If the rollback fails
              too, the journal stays and each host's state is printed.
Downtime (the window in which a real completion is not served: refused, an error, or vLLM's drain
answer, empty and finished `abort`; from the head's stop step on) is measured from this machine.

The phases are the steps of playbooks/reload.yaml run by the same runner as `up`.
"""

from __future__ import annotations

import threading
import time
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from sparkctl import httpclient, state
from sparkctl.errors import InputError, SparkctlError
from sparkctl.inventory.models import Inventory
from sparkctl.inventory.paths import flatten
from sparkctl.records import (
    AppliedRecord,
    ContainerState,
    Event,
    HistoryRecord,
    HostState,
    JournalRecord,
    RuntimeStart,
    StopRecord,
    TimelineEntry,
    dump,
)
from sparkctl.reload_outcome import NO_RUN_FOLLOWS, NOT_APPLIED, Outcome
from sparkctl.runtime.compile_cache import compile_key
from sparkctl.runtime.compile_cache import compiles as _compiles
from sparkctl.steps.transfer import Phase
from sparkctl.transport.redact import MASK, Digests, legacy_digest, redact_obj, state_digests

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.lock import ClusterLock
    from sparkctl.runner import Recap, Stage
    from sparkctl.steps.base import RunContext, RunOptions, StepResult
    from sparkctl.steps.runtime import DrainCounts
    from sparkctl.transport.ssh import Fleet, HostSession

RELOAD_PLAYBOOK = "reload"  # its entries name the journal phase each step belongs to (`phase:`)


class ReloadInterrupted(SparkctlError):
    """An earlier reload did not finish; this command will not start another one over it."""

    exit_code = 1


# --- plan -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class FieldChange:
    path: str
    old: Any
    new: Any

    def to_dict(self) -> dict:
        return {"field": self.path, "old": self.old, "new": self.new}


def diff_inventories(old: dict, new: dict) -> list[FieldChange]:
    """Every field that differs, secrets masked (the record keeps only their digests)."""
    d = state_digests(str((new.get("cluster") or {}).get("name", "")))  # one cluster (same_cluster)
    a, b = flatten(redact_obj(old, digests=d)), flatten(redact_obj(new, digests=d))
    return [FieldChange(p, _shown(a.get(p)), _shown(b.get(p))) for p in sorted(set(a) | set(b)) if a.get(p) != b.get(p)]


def _shown(v: Any) -> Any:
    return MASK if isinstance(v, str) and v.startswith(MASK) else v


def compile_fields(changes: list[FieldChange]) -> list[str]:
    return [c.path for c in changes if _compiles(c.path)]


@dataclass
class ReloadPlan:
    """What the reload will do, built from the steps' own check-mode plans (so --check is the run),
    the field diff and the warm/cold prediction."""

    kind: str  # reload | restart | rollback
    from_hash: Optional[str]
    to_hash: str
    changes: list[FieldChange]
    groups: list[str]  # restart groups that restart: engine (head + workers), drafter
    containers: list[str]
    compile_changed: list[str]
    prediction: Optional[str]  # warm | cold | None (the engine does not restart)
    expected_seconds: Optional[float]
    prestage: list[str]
    compile_key: str = ""
    # every operation a step plans, "step on host: summary" (the restart is among them)
    operations: list[str] = field(default_factory=list)
    # the steps' plan did not complete (a host unreachable, a plan blocked): the run stops there
    stops: Optional[str] = None
    # the gateway's hold the stop step plans (runtime/gateway_admin.py Hold's fields), None: no hold
    gateway: Optional[dict] = None
    gateway_enabled: bool = True

    @property
    def empty(self) -> bool:
        return not self.operations and not self.changes and not self.stops

    def to_dict(self) -> dict:
        return {
            "kind": self.kind,
            "from_config": self.from_hash,
            "to_config": self.to_hash,
            "changes": [c.to_dict() for c in self.changes],
            "restart_groups": self.groups,
            "restart_containers": self.containers,
            "compile_fields_changed": self.compile_changed,
            "prediction": self.prediction,
            "expected_start_seconds": self.expected_seconds,
            "prestage": self.prestage,
            "gateway": self.gateway_plan(),
        }

    def gateway_plan(self) -> Optional[dict]:
        """What clients see during this change: the hold sent (and whether it answers 503 at once), or why none."""
        from sparkctl.runtime.gateway_admin import Hold

        if self.gateway:
            h = Hold(**self.gateway)
            return {"hold": True, **h.to_data(), "answers_503": h.rejects, "clients": h.clients()}
        if "engine" not in self.groups:
            return None
        why = (
            "gateway.enabled is false: clients are refused from the head's SIGTERM until the new engine serves"
            if not self.gateway_enabled
            else "no gateway runs on the head yet: clients are refused from the head's SIGTERM until the new engine serves"
        )
        return {"hold": False, "clients": why}

    def lines(self) -> list[str]:
        out = [f"{self.kind}: config {self.from_hash or '(none recorded)'} -> {self.to_hash}"]
        if self.changes:
            out.append(f"{len(self.changes)} field(s) change:")
            out += [f"  {c.path}: {c.old!r} -> {c.new!r}" for c in self.changes]
        else:
            out.append("no field changes" + (" (restart of the recorded config)" if self.groups else ""))
        if self.groups:
            rest = "; the rest keeps running" if len(self.groups) < 2 else ""
            out.append(f"restarts: {', '.join(self.containers)} ({' and '.join(self.groups)}){rest}")
        else:
            out.append("restarts: nothing (no container's config changes)")
        if self.prediction:
            if self.prediction == "warm" and self.compile_changed:
                why = (
                    f"compile inputs changed ({', '.join(self.compile_changed)}) to values this cluster has "
                    "served before: their graphs are in the cache"
                )
            elif self.prediction == "warm":
                why = "no compile input changed: vLLM loads the compiled graphs from the cache"
            elif self.compile_changed:
                why = f"compile inputs changed: {', '.join(self.compile_changed)}"
            else:
                why = "the cache holds no compiled graphs for this config"
            exp = f", expected ~{self.expected_seconds:.0f} s to serve (this cluster's history)" if self.expected_seconds else ""
            out.append(f"start: {self.prediction} ({why}){exp}")
        gw = self.gateway_plan()
        if gw:
            out.append(f"gateway: {gw['clients']}")
        # repairs the steps plan besides the restart (a node's image, a fabric MTU): the run does them too
        out += [f"also: {op}" for op in self.operations if op.split(" ", 1)[0] in REPAIR_STEPS]
        out += [f"pre-staged while the old config serves: {p}" for p in self.prestage]
        if self.stops:
            out.append(f"the run would stop here: {self.stops}")
        return out


REPAIR_STEPS = ("fabric", "images", "caches", "engram")  # steps whose operations are not the restart itself


def plan_reload(
    kind: str,
    recorded: Optional[AppliedRecord],
    new: Inventory,
    events: list[Event],
    cache_warm: bool,
    recap,
) -> ReloadPlan:
    """The reload's plan from `recap`, the check-mode run of the reload playbook for NEW (the
    steps' own plans: what restarts is what the runtime step starts), with the field diff from the
    recorded config and warm/cold from the compile inputs this cluster has served."""
    from sparkctl.launch.plan import render, restart_group
    from sparkctl.runtime.gateway_admin import gateway_hold
    from sparkctl.runtime.start_forecast import forecast
    from sparkctl.steps.runtime import planned_starts

    launch = render(new)
    changes = diff_inventories(recorded.inventory, new.model_dump(mode="json")) if recorded else []
    starting = planned_starts(recap.plans)
    containers = [c.name for c in launch.containers if c.name in starting]
    groups = sorted({restart_group(c.role) for c in launch.containers if c.name in starting})
    compile_changed = compile_fields(changes)
    key = compile_key(new.model_dump(mode="json"))
    start = forecast(new.model_dump(mode="json"), recorded, events, cache_warm) if "engine" in groups else None
    prestage = []
    if any(c.path.startswith("hosts.") and ".fabric" in c.path for c in changes):
        prestage.append("fabric addresses and MTU (netplan)")
    images = sorted({c.image for c in launch.containers})
    prestage.append(f"image(s) {', '.join(images)} on every node, same image ID, before anything stops")
    prestage.append(f"kernel cache directory {new.caches.host_path} on every runtime node")
    if new.engram:
        prestage.append(f"Engram tables in {new.engram.host}'s RAM ({new.engram.target}), SHA-256 verified")
    operations = [f"{p.step} on {p.host}: {c.summary}" for p in recap.plans for c in p.changes]
    failed = next((r for r in recap.results if r.status == "failed"), None)
    stops = f"{failed.step} on {failed.host}: {failed.message}" if failed else None
    return ReloadPlan(
        kind,
        recorded.config_hash if recorded else None,
        launch.config_hash,
        changes,
        groups,
        containers,
        compile_changed,
        start.cache if start else None,
        start.seconds if start else None,
        prestage,
        key,
        operations,
        stops,
        gateway_hold(recap.plans),
        new.gateway.enabled,
    )


def same_cluster(current: Inventory, new: Inventory) -> None:
    """NEW must describe the same cluster: same name, hosts, roles and SSH addresses."""
    problems = []
    if new.cluster.name != current.cluster.name:
        problems.append(f"cluster.name is {new.cluster.name!r}, the running cluster is {current.cluster.name!r}")
    if set(new.hosts) != set(current.hosts):
        problems.append(f"hosts are {sorted(new.hosts)}, the running cluster has {sorted(current.hosts)}")
    for h in set(new.hosts) & set(current.hosts):
        a, b = current.hosts[h], new.hosts[h]
        if a.role != b.role:
            problems.append(f"hosts.{h}.role is {b.role!r}, the running cluster has {a.role!r}")
        if (a.ssh.address, a.ssh.port) != (b.ssh.address, b.ssh.port):
            problems.append(f"hosts.{h}.ssh differs ({b.ssh.address}:{b.ssh.port} vs {a.ssh.address}:{a.ssh.port})")
    if problems:
        raise InputError(
            "the new config is not the same cluster: " + "; ".join(problems),
            fix="reload changes a cluster's config, not its shape: use the same hosts and roles "
            "(a different cluster is `sparkctl up -i NEW`)",
        )


def restore_secrets(recorded_inventory: dict, current: Inventory) -> Inventory:
    """The recorded inventory (secrets kept as digests) with each secret taken from `current`
    where its digest matches; a secret the current inventory no longer holds cannot be restored."""
    cur = flatten(current.model_dump(mode="json"))
    rec = flatten(recorded_inventory)
    fingerprints: tuple[Digests, ...] = (state_digests(current.cluster.name), True, legacy_digest)
    missing = []
    for path, value in rec.items():
        if isinstance(value, str) and MASK in value:
            have, key = cur.get(path), path.rsplit(".", 1)[-1]
            # the record holds this field as redact_obj wrote it (by the field's name, else by the value's
            # look), with today's fingerprint (salted with the cluster's name) or an older one: unsalted
            # scrypt, or the 48-bit SHA-256 written before issue 39
            if isinstance(have, str) and value in (redact_obj({key: have}, digests=d)[key] for d in fingerprints):
                rec[path] = have
            else:
                missing.append(path)
    if missing:
        raise InputError(
            f"the recorded config keeps only digests of {', '.join(missing)}, and the current inventory's values differ",
            fix="pass the inventory that holds those values with -i (the record never stores a secret)",
        )
    return Inventory.model_validate(_unflatten(rec))


def _unflatten(flat: dict[str, Any]) -> dict:
    out: dict = {}
    for path, v in flat.items():
        node = out
        parts = path.split(".")
        for p in parts[:-1]:
            node = node.setdefault(p, {})
        node[parts[-1]] = v
    return out


# --- run ---------------------------------------------------------------------------------------


class Journal:
    """The reload's phases on the head, written as they happen (so a later command can tell an
    interrupted reload and `--resume` or `rollback` it), and the timeline for --json."""

    ORDER = ("prestage", "drain", "restart", "verify", "commit", "done", "rollback")

    def __init__(self, session, record: JournalRecord):
        self.session = session
        self.record = record.model_copy(update={"phase": "validate", "timeline": []})
        self.t0 = time.time()
        self._lock = threading.Lock()  # steps apply hosts in parallel: progress arrives from several threads

    def phase(self, name: str) -> None:
        """Enter phase `name` (never back to an earlier one): written to the head before going on."""
        with self._lock:
            tl = self.record.timeline
            if tl and self.ORDER.index(name) <= self.ORDER.index(tl[-1].phase):
                return
            now = time.time()
            if tl:
                tl[-1].end = round(now - self.t0, 3)
            tl.append(TimelineEntry(phase=name, start=round(now - self.t0, 3), end=None))
            self.record.phase = name
            state.write_json(self.session, state.JOURNAL, dump(self.record))

    def close(self, keep: bool = False) -> None:
        tl = self.record.timeline
        if tl and tl[-1].end is None:
            tl[-1].end = round(time.time() - self.t0, 3)
        if keep:
            state.write_json(self.session, state.JOURNAL, dump(self.record))
        else:
            state.remove(self.session, state.JOURNAL)


class DowntimeProbe:
    """What a client of the engine sees, from this machine: downtime = the time no completion is served.

    A real one-token completion (no model named: whichever the engine serves, so it holds across a
    rename) every `every_up` s while served, every `every_down` s while not. Down: no answer, an error
    status, or vLLM 0.33's drain answer, a 200 whose choices end `abort` with nothing in them (from
    SIGTERM on, /health and /v1/models stay 200: docs/conformance.md h_drain_*). `engine_stops()`
    (the stop step begins on the head) opens the window at once and sends nothing until
    `engine_stopped()` (its result): the drain begins there, and no probe request is then at the
    engine to be counted among the drain's in-flight requests."""

    def __init__(self, url: str, every_up: float = 0.5, every_down: float = 0.1, timeout: float = 5.0):
        self.url, self.every_up, self.every_down, self.timeout = url, every_up, every_down, timeout
        self.windows: list[list[Optional[float]]] = []
        self._stop = threading.Event()
        self._paused = threading.Event()
        self._idle = threading.Event()  # no probe request at the engine
        self._idle.set()
        self._lock = threading.Lock()
        self._t = threading.Thread(target=self._run, name="sparkctl-downtime", daemon=True)

    def start(self) -> "DowntimeProbe":
        self._t.start()
        return self

    def _down(self, t: float) -> None:
        with self._lock:
            if not self.windows or self.windows[-1][1] is not None:
                self.windows.append([t, None])

    def _up(self, t: float) -> None:
        with self._lock:
            if self.windows and self.windows[-1][1] is None:
                self.windows[-1][1] = t

    def _served(self, client) -> bool:
        import httpx

        try:
            r = client.post(f"{self.url}/v1/completions", json={"prompt": "1", "max_tokens": 1, "temperature": 0})
            choices = r.json().get("choices") if r.status_code == 200 else None
        except (httpx.HTTPError, ValueError, AttributeError):
            return False
        if not isinstance(choices, list) or not choices:
            return False
        return all(isinstance(c, dict) and c.get("finish_reason") not in (None, "abort") for c in choices)

    def _run(self) -> None:
        with httpclient.client(timeout=self.timeout, trust_env=False) as client:
            while not self._stop.is_set():
                t = time.monotonic()
                up = None
                if not self._paused.is_set():
                    self._idle.clear()
                    try:
                        if not self._paused.is_set():
                            up = self._served(client)
                            if self._paused.is_set():
                                up = None  # sent before the stop began: says nothing about the window opened since
                    finally:
                        self._idle.set()
                if up is True:
                    self._up(t)
                elif up is False:
                    self._down(t)
                every = self.every_up if up else self.every_down
                self._stop.wait(max(0.0, every - (time.monotonic() - t)))

    def engine_stops(self) -> None:
        """sparkctl begins taking the engine down: down from now; wait out a probe request under way."""
        if not self._paused.is_set():
            self._paused.set()
            self._down(time.monotonic())
            self._idle.wait(self.timeout + 1)

    def engine_stopped(self, stopped: bool = True) -> None:
        """The stop step ended; probe again. stopped=False: it stopped nothing, the window it opened goes."""
        if self._paused.is_set():
            if not stopped:
                with self._lock:
                    if self.windows and self.windows[-1][1] is None:
                        self.windows.pop()
            self._paused.clear()

    def stop(self) -> float:
        self._stop.set()
        self._t.join(self.timeout + 1)
        end = time.monotonic()
        return round(sum((b or end) - (a or end) for a, b in self.windows), 2)


@dataclass
class ReloadReport:
    plan: ReloadPlan
    outcome: Outcome = Outcome.PLANNED
    reason: Optional[str] = None
    downtime: Optional[float] = None
    drain: Optional[DrainCounts] = None
    stops: list[StopRecord] = field(default_factory=list)  # each container's stop: seconds, killed (steps/runtime.py)
    runtime_start: Optional[RuntimeStart] = None
    decode_tokens_per_s: Optional[float] = None
    timeline: list[TimelineEntry] = field(default_factory=list)  # the journal's phases
    results: list[dict] = field(default_factory=list)
    rollback_results: list[dict] = field(default_factory=list)
    hosts_state: dict[str, HostState] = field(default_factory=dict)  # after a failed rollback
    notes: list[str] = field(default_factory=list)

    @property
    def failed(self) -> bool:
        return self.outcome in NOT_APPLIED

    def to_dict(self) -> dict:
        return {
            "outcome": self.outcome,
            "reason": self.reason,
            "plan": self.plan.to_dict(),
            "downtime_seconds": self.downtime,
            "drain": self.drain,
            "stops": [dump(s) for s in self.stops],
            "runtime_start": dump(self.runtime_start) if self.runtime_start else None,
            "decode_tokens_per_s": self.decode_tokens_per_s,
            "timeline": [dump(t) for t in self.timeline],
            "results": self.results,
            "rollback_results": self.rollback_results,
            "hosts_state": {h: dump(s) for h, s in self.hosts_state.items()},
            "notes": self.notes,
        }


def run_reload(
    kind: str,
    current: Inventory,
    new: Optional[Inventory],
    *,
    check: bool = False,
    resume: bool = False,
    to: int = 0,
    deadline: Optional[float] = None,
    min_ratio: Optional[float] = None,
    wait: float = 0,
    confirm: Callable[[ReloadPlan], bool] = lambda plan: True,
    progress: Callable[[str, str, Phase], None] = lambda h, s, t: None,
    on_result: Callable[[Any], None] = lambda r: None,
    say: Callable[[str], None] = lambda msg: None,
    noted: Optional[Callable[[ReloadReport], dict]] = None,
) -> ReloadReport:
    """reload (new given), restart (new is None: the recorded config, every group), rollback
    (new is None: the last good config, or history record `to` from the newest).

    The plan is the reload playbook run in check mode (the steps' own plans); the run is the same
    playbook under the cluster lock, taken the way every changing command takes it
    (lock.cluster_lock: SIGTERM/SIGHUP end the run like Ctrl-C, the lock released, the journal
    left for --resume or rollback). The run restarts only the containers the plan named.
    `noted(report)`: more fields for the history event, asked at the end (the keeper's trigger,
    cause, and the downtime since the crash rather than since this run began)."""
    from sparkctl.launch.plan import render
    from sparkctl.lock import cluster_lock
    from sparkctl.session import ClusterSession

    if new is not None:
        same_cluster(current, new)
    head = current.hosts_with_role("head")[0]
    with ClusterSession(current) as cluster:
        fleet, session = cluster.fleet, cluster[head]
        # the head's record, journal and events: an unreachable head fails the command as it came
        f = cluster.read(head, {"applied", "journal", "events", "cache"} | ({"history"} if to else set()))
        recorded, journal = f.applied, f.journal
        if recorded is None and "applied" in f.errors:  # a record that cannot be read is no "none yet"
            raise SparkctlError(f.errors["applied"], fix=f"look at {state.APPLIED} on {head}; `sparkctl up` rewrites it")
        if kind in ("restart", "rollback") and recorded is None:
            raise InputError(f"no applied config is recorded on {head}", fix="bring the cluster up first: `sparkctl up`")
        if kind == "rollback" and recorded is not None:
            source = recorded if not to else _history_record(f.history, to)
            new = restore_secrets(source.inventory, current)
        elif kind == "restart" and recorded is not None:
            new = restore_secrets(recorded.inventory, current)
        if new is None:  # a reload is given its new config; restart and rollback found theirs above
            raise InputError(f"{kind} has no new config to run", fix="`sparkctl reload --config NEW`")
        if resume:
            if not journal:
                raise InputError("there is no interrupted reload to resume", fix="`sparkctl reload --config NEW` starts one")
            if render(new).config_hash != journal.to_config:
                raise InputError(
                    f"--config renders {render(new).config_hash}, the interrupted reload was to {journal.to_config}",
                    fix="pass the same NEW file as the interrupted reload, or `sparkctl rollback`",
                )
        from sparkctl.steps.base import RunOptions

        options = RunOptions(event=kind, timeout=deadline, min_throughput_ratio=min_ratio)
        planned = _check_run(kind, new, fleet, options)
        plan = plan_reload(kind, recorded, new, f.events, bool(f.cache and f.cache.warm_hashes), planned)
        report = ReloadReport(plan)
        if "journal" in f.errors:  # a reload's journal this sparkctl cannot read: said, not taken for one
            report.notes.append(f.errors["journal"])
        if check:
            report.results = [r.to_dict() for r in planned.results]
            report.reason = f"the run would stop at {plan.stops}" if plan.stops else None
            if journal:
                report.notes.append(journal.interrupted())
            return report
        if plan.empty and kind == "reload" and not resume:
            report.outcome = Outcome.NOTHING_TO_DO
            report.reason = "the new config renders the recorded one"
            return report
        if not confirm(plan):
            raise InputError("not confirmed: nothing was changed", fix="pass --yes to skip the question")

        finishing = resume or kind == "rollback"  # only these go on over an interrupted reload

        def take_over(holder) -> bool:
            """A gone holder may be replaced only by the command finishing the reload it was."""
            if not (journal and journal.lock_token == holder.token):
                return False
            if not finishing:
                raise ReloadInterrupted(
                    journal.interrupted(), fix="finish it: `sparkctl reload --resume --config NEW`, or `sparkctl rollback`"
                )
            say(f"took over the cluster lock from the interrupted {journal.kind} ({holder.describe()})")
            return True

        with cluster_lock(fleet, wait=wait, notify=say) as lock:
            assert lock is not None  # hold=True: the lock is always yielded
            lock.take(take_over)
            if journal and not finishing:  # checked under the lock: a running reload is "locked"
                raise ReloadInterrupted(
                    journal.interrupted(), fix="finish it: `sparkctl reload --resume --config NEW`, or `sparkctl rollback`"
                )
            return _execute(
                kind,
                current=current,
                new=new,
                recorded=recorded,
                plan=plan,
                report=report,
                fleet=fleet,
                session=session,
                lock=lock,
                resume=resume,
                # the stop step refuses to restart anything the plan did not name
                options=replace(options, confirmed_restart=tuple(plan.containers)),
                progress=progress,
                on_result=on_result,
                say=say,
                noted=noted,
            )


def _check_run(kind: str, new: Inventory, fleet: Fleet, options: RunOptions) -> Recap:
    """The reload playbook for NEW in check mode: every step's plan, nothing changed, no lock."""
    from sparkctl.runner import run_playbook
    from sparkctl.steps.base import RunContext

    ctx = RunContext(inventory=new, fleet=fleet, check_mode=True, force=(kind == "restart"), options=options)
    return run_playbook(ctx, reload_stages(), RELOAD_PLAYBOOK)


def reload_stages(name: str = RELOAD_PLAYBOOK) -> list[Stage]:
    """The reload playbook's stages, each entry naming its journal phase: a step without one would
    run unjournaled, so the playbook is refused before any host is touched."""
    from sparkctl.runner import build_stages, load_playbook

    playbook = load_playbook(name)
    missing = [s.step for s in playbook.steps if s.phase is None]
    if missing:
        raise InputError(
            f"playbook {name!r}: step(s) {', '.join(missing)} name no journal phase",
            fix=f"give each entry of playbooks/{name}.yaml its `phase:` (runner.py JournalPhase)",
        )
    return build_stages(playbook)


def _history_record(history: list[HistoryRecord], to: int) -> HistoryRecord:
    from sparkctl.history import usable

    records = usable(history)
    if not 1 <= to <= len(records):
        raise InputError(f"--to {to}: the head keeps {len(records)} earlier config(s)", fix="`sparkctl history` lists them")
    return records[-to]


def _execute(
    kind: str,
    *,
    current: Inventory,  # the inventory given (its secrets restore the recorded config's)
    new: Inventory,  # the config this command runs
    recorded: Optional[AppliedRecord],  # the head's applied record (the last good config), None: none yet
    plan: ReloadPlan,
    report: ReloadReport,  # filled in as the run goes
    fleet: Fleet,
    session: HostSession,  # the head's: the journal and the event are written there
    lock: ClusterLock,
    resume: bool,
    options: RunOptions,
    progress: Callable[[str, str, Phase], None],
    on_result: Callable[[StepResult], None],
    say: Callable[[str], None],
    noted: Optional[Callable[[ReloadReport], dict]],
) -> ReloadReport:
    from sparkctl.runner import build_stages, compensate, load_playbook, run_playbook
    from sparkctl.runtime import health
    from sparkctl.steps.base import RunContext, RunOptions

    last_good = restore_secrets(recorded.inventory, current) if recorded else current
    stages = reload_stages()
    phases = {s.name: s.spec.phase for s in stages if s.spec.phase}  # step -> the journal phase it belongs to
    journal = Journal(
        session,
        JournalRecord(
            kind=kind,
            from_config=plan.from_hash,
            to_config=plan.to_hash,
            started_at=state.now(),
            by=state.who(),
            lock_token=lock.me.token,
            resumed=resume,
        ),
    )
    probe = DowntimeProbe(health.base_url(new)).start()
    head = new.hosts_with_role("head")[0]
    engine_restarts = "engine" in plan.groups

    def tracked(host: str, step: str, text: Phase) -> None:  # a step starts applying: its phase begins
        if step in phases:
            journal.phase(phases[step])
        if step == "stop" and host == head and engine_restarts:
            probe.engine_stops()  # the drain: vLLM answers new requests empty `abort` from SIGTERM on
        progress(host, step, text)

    def journaled(r: StepResult) -> None:  # a step ended (also those that changed nothing): its phase was reached
        if r.step in phases and phases[r.step] != "prestage" and r.status != "skipped":
            journal.phase(phases[r.step])
        if r.step == "stop" and r.host == head:
            probe.engine_stopped(stopped=r.status in ("changed", "failed"))
        # journaled with the next phase: how each stop went (the runtime step's replaced drafter's too)
        if r.step in ("stop", "runtime") and ctx.outputs.stops:
            journal.record.stops = list(ctx.outputs.stops)
        on_result(r)

    def finish(outcome: Outcome, event: Optional[Outcome]) -> ReloadReport:
        """The end of the command: the journal is removed and the event logged, or (event None: the
        rollback failed too) the journal stays, with each host's state."""
        report.downtime = probe.stop()
        report.outcome = outcome
        report.timeline = journal.record.timeline
        if outcome in NO_RUN_FOLLOWS:  # no run comes after: undo what is left
            # the newest run's first (the rollback's, then this one's): one release of the gateway's hold
            for run, run_stages in ((back, back_stages), (ctx, stages)):
                notes = compensate(run, run_stages) if run is not None else []
                report.notes += notes
                if notes:
                    break
        if event is None:
            report.hosts_state = journal.record.hosts_state = _hosts_state(fleet, last_good)
            journal.close(keep=True)
            return report
        journal.close()
        state.append_event(session, history_event(kind, event, plan, report, noted(report) if noted else None))
        return report

    back: Optional[RunContext] = None  # the rollback's run, if it comes to one
    back_stages: list[Stage] = []  # its stages: the up playbook, built only for a rollback
    journal.phase("prestage")
    ctx = RunContext(inventory=new, fleet=fleet, force=(kind == "restart"), options=options, progress=tracked, lock=lock)
    recap = run_playbook(ctx, stages, RELOAD_PLAYBOOK, on_result=journaled)
    report.results = [r.to_dict() for r in recap.results]
    report.runtime_start = ctx.outputs.runtime_start
    report.decode_tokens_per_s = ctx.outputs.decode_tokens_per_s
    report.drain = ctx.outputs.drain
    report.stops = list(ctx.outputs.stops)
    if not recap.failed:
        journal.phase("done")
        return finish(Outcome.OK, Outcome.OK)

    failed = next(r for r in recap.results if r.status == "failed")
    report.reason = f"{failed.step} on {failed.host}: {failed.message}"
    # nothing was changed or stopped: the old config still serves as it was
    if not any(r.status == "changed" for r in recap.results):
        return finish(Outcome.NOTHING_STOPPED, Outcome.FAILED)
    if kind == "restart":
        # the config that failed is the last good one: a rollback would only start it once more (a
        # crash loop's recoveries would each start the crashing engine twice)
        say(f"restart failed ({report.reason}); no rollback: the last good config is the one that failed")
        return finish(Outcome.RESTART_FAILED, Outcome.RESTART_FAILED)
    say(f"{kind} failed ({report.reason}); rolling back to the last good config {plan.from_hash}")
    journal.phase("rollback")
    back = RunContext(
        inventory=last_good,
        fleet=fleet,
        options=RunOptions(event="rollback", timeout=options.timeout),
        progress=progress,
        lock=lock,
    )
    back_stages = build_stages(load_playbook("up"))
    recap2 = run_playbook(back, back_stages, "rollback", on_result=on_result)
    report.rollback_results = [r.to_dict() for r in recap2.results]
    return finish(Outcome.ROLLBACK_FAILED, None) if recap2.failed else finish(Outcome.ROLLED_BACK, Outcome.ROLLED_BACK)


def history_event(kind: str, outcome: str, plan: ReloadPlan, report: ReloadReport, noted: Optional[dict] = None) -> Event:
    """The events.jsonl line `sparkctl history` shows for this reload, restart or rollback
    (`noted` adds or overrides fields: the keeper's trigger, cause and downtime)."""
    extra = {
        "from_config": plan.from_hash,
        "reason": report.reason,
        "downtime_seconds": report.downtime,
        "restarted": plan.containers,
        "stops": report.stops,
        **(noted or {}),
    }
    event = state.event(kind, outcome, plan.to_hash, report.runtime_start, plan.compile_key, **extra)
    return Event.model_validate(redact_obj(dump(event)))


def _hosts_state(fleet: Fleet, inv: Inventory) -> dict[str, HostState]:
    """What runs where right now, for the operator after a failed rollback (read again: the
    rollback changed it)."""
    from sparkctl.session import ClusterSession

    def containers(facts: HostFacts) -> list[ContainerState]:
        return [ContainerState(name=c.name, state=c.status, config_hash=c.config_hash) for c in facts.containers or []]

    cluster = ClusterSession(inv, fleet=fleet)
    found = cluster.refresh({"containers"}, wait=30)
    return {
        h: HostState(containers=containers(found[h])) if h in found else HostState(error=cluster.unreachable[h].message)
        for h in cluster.hosts
    }
