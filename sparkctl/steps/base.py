"""What a step is: facts -> plan -> apply, with results an operator can read.

A step (modelled on pyinfra's operations) declares the fact kinds it reads (`facts`, gathered
with every other step's in one round trip per host by the runner), plans for the whole cluster
in one call from the inventory and those facts (pure: testable on recorded output without a
host), and applies exactly the planned operations, nothing else. An empty plan carries the
reason nothing is needed ("fabric IP 10.231.100.2/24 already on enp1s0f0np0"). Steps never
print: the runner owns order, concurrency, progress and output; the playbook says the order.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from functools import cached_property
from typing import TYPE_CHECKING, Any, Callable, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field

from sparkctl.inventory.models import Inventory

if TYPE_CHECKING:  # imported lazily at run time: a no-op `up` has a 1 s budget
    from sparkctl.facts.host import HostFacts
    from sparkctl.fleet.model import Fleet as FleetSpec
    from sparkctl.launch.plan import LaunchPlan
    from sparkctl.lock import ClusterLock
    from sparkctl.records import RuntimeStart, StopRecord
    from sparkctl.runtime.gateway_admin import HeldGateway
    from sparkctl.session import ClusterSession
    from sparkctl.steps.runtime import DrainCounts, Drift
    from sparkctl.steps.transfer import Phase
    from sparkctl.transport.ssh import Fleet, HostSession

Status = Literal["ok", "changed", "failed", "skipped"]


@dataclass(frozen=True)
class Change:
    """One operation a step will perform on a host: printable, comparable, and exactly what runs."""

    action: str  # machine-readable verb, e.g. "set-mtu"
    summary: str  # what an operator reads, e.g. "set MTU 9000 on enp1s0f0np0 (now 1500)"
    data: dict[str, Any] = field(default_factory=dict)


@dataclass(frozen=True)
class Plan:
    step: str
    host: str
    changes: tuple[Change, ...] = ()
    reason: str = ""  # why nothing is needed (empty plan) or why these changes
    blocked: Optional[str] = None  # the step cannot proceed on this host (checked before applying)

    @property
    def empty(self) -> bool:
        return not self.changes

    def to_dict(self) -> dict:
        return {
            "step": self.step,
            "host": self.host,
            "reason": self.reason,
            "operations": [{"action": c.action, "summary": c.summary} for c in self.changes],
            **({"blocked": self.blocked} if self.blocked else {}),
        }


@dataclass
class StepResult:
    step: str
    host: str
    status: Status
    message: str
    changes: list[str] = field(default_factory=list)
    seconds: float = 0.0
    fix: Optional[str] = None
    operations: list[str] = field(default_factory=list)  # actions planned (--check) or performed

    def to_dict(self) -> dict:
        doc = {**asdict(self), "seconds": round(self.seconds, 3)}
        if not self.fix:
            del doc["fix"]
        return doc


@dataclass
class Outputs:
    """What steps hand to later steps in one run: declared and typed, never looked up by string."""

    # images -> runtime, record: per host, image reference -> the ID it holds once `images` is done
    # (verified after applying; predicted by the plan in --check; None = cannot be known before)
    image_ids: dict[str, dict[str, Optional[str]]] = field(default_factory=dict)
    # stop/runtime: why the runtime must restart (empty: it runs the inventory's config), decided once
    restart: Optional["Drift"] = None
    # runtime -> the CLI's --json: how the last start went (seconds, warm/cold)
    runtime_start: Optional[RuntimeStart] = None
    # throughput -> record: decode tok/s measured after the start (the next reload's baseline)
    decode_tokens_per_s: Optional[float] = None
    # throughput -> record: decode tok/s per request by concurrency ("1", "2", "4" ... streams), measured
    # idle or from the engine's own timings under load: the rates a later reload is judged against
    decode_by_streams: dict[str, float] = field(default_factory=dict)
    # stop -> reload: the head's in-flight requests at the drain
    drain: Optional[DrainCounts] = None
    # stop -> runtime, and the command after a failed run: the gateway hold this run sent, its host,
    # and whether it was released
    gateway_hold: Optional[HeldGateway] = None
    # keeper (head) -> keeper (the other hosts): the head's keeper key, "type base64 comment", to authorise
    keeper_public_key: Optional[str] = None
    # stop -> reload's journal and report: each container's stop {host, container, seconds, timeout_s, exit_code, killed}
    stops: list[StopRecord] = field(default_factory=list)
    # fabric (its bandwidth probe after a change) or weights (before a copy, in --check) -> weights:
    # (host, device) -> the rail's Gb/s measured in this run, at both of its ends
    rail_gbps: dict[tuple[str, str], float] = field(default_factory=dict)


@dataclass(frozen=True)
class RunOptions:
    """What the command asks of its run's steps (its flags): declared and typed, never looked up by string."""

    event: str = "up"  # the command running the playbook (up, reload, restart, rollback): the record's, the hold's
    timeout: Optional[float] = None  # seconds a start may take (steps/runtime.py DEFAULT_TIMEOUT when None)
    side_load: bool = False  # images: copy the image over SSH from the control machine, never pull
    pull: bool = False  # images: pull even where the node holds the image
    drain: Optional[int] = None  # stop: seconds in-flight requests may finish (runtime.shutdown_timeout when None)
    min_throughput_ratio: Optional[float] = None  # reload's throughput gate: the decode rate kept, against the record
    # reload: the containers its --check pass planned to restart; the stop step refuses to restart others
    confirmed_restart: Optional[tuple[str, ...]] = None


@dataclass
class RunContext:
    """What every step sees during one run: the inventory, the sessions, facts gathered once."""

    inventory: Inventory
    fleet: Optional[Fleet]  # the run's SSH sessions (None: a test planning from recorded facts)
    facts: dict[str, HostFacts] = field(default_factory=dict)  # host -> its facts, the cluster session's cache
    check_mode: bool = False
    force: bool = False
    options: RunOptions = field(default_factory=RunOptions)
    # (host, step, the phase it is in: its text, or a transfer's bytes, rate and time left)
    progress: Callable[[str, str, Phase], None] = lambda host, step, text: None
    outputs: Outputs = field(default_factory=Outputs)
    # the cluster lock, when the runner takes it before the first change (lock.cluster_lock lazy)
    lock: Optional[ClusterLock] = None
    # `fleet up`'s front-door run (fleet/router_step.py): the fleet whose door it deploys; None for a cluster's run
    fleet_spec: Optional[FleetSpec] = None

    def __post_init__(self) -> None:
        # the run's calls to the cluster (smoke, first token, decode, the gateway's wait) send its key
        from sparkctl.transport import api_key

        api_key.authorize(self.inventory, self.fleet)

    @property
    def launch(self) -> LaunchPlan:
        """The rendered launch (containers, commands, config hash): launch.render keeps it, once per inventory."""
        from sparkctl.launch.plan import render

        return render(self.inventory)

    @cached_property
    def cluster(self) -> ClusterSession:
        """The run's cluster session over `fleet`, `facts` and `lock` (it shares them): the runner
        gathers through it, steps re-read through `refresh`."""
        from sparkctl.session import ClusterSession

        return ClusterSession(self.inventory, fleet=self.fleet, facts=self.facts, lock=self.lock)

    @property
    def sessions(self) -> Fleet:
        """The run's SSH sessions (applying needs them: a plan from recorded facts has none)."""
        if self.fleet is None:
            raise RuntimeError("applying a step needs the run's SSH sessions (RunContext.fleet)")
        return self.fleet

    def session(self, host: str) -> HostSession:
        """The run's SSH session to `host`."""
        return self.sessions[host]

    def refresh(self, host: str, kinds: set[str], timeout: float = 60) -> HostFacts:
        """Read these fact kinds on `host` again (after this run changed them) and return its facts."""
        return self.cluster.read(host, kinds, timeout=timeout)


class StepOptions(BaseModel):
    """A playbook entry's `options`: what a step reads of them, declared once (an option no step
    reads is refused when the playbook is read, not ignored)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    remove: bool = Field(False, description="remove what the step placed (down: the keeper's unit and key, the gateway)")
    always: bool = Field(False, description="stop whatever runs, whether or not it matches the inventory (down)")
    side_load: bool = Field(False, description="images: copy the image over SSH, never pull (as --side-load)")
    pull: bool = Field(False, description="images: pull even where the node holds the image (as --pull)")


class Step:
    """Base class: subclasses set `name` and `facts`, and implement `hosts`, `plan_host` (or
    `plan` for a decision over the whole cluster) and `apply`; `verify` is optional."""

    name: str = ""
    facts: frozenset[str] = frozenset()  # fact kinds (registered in facts/*.py, facts/base.py) the plan reads
    options: StepOptions = StepOptions()  # the playbook entry's `options` (set per run by the runner)

    def hosts(self, inv: Inventory) -> list[str]:
        """The hosts this step plans for, in the order it applies them when the playbook says in order."""
        return list(inv.hosts)

    def prepare(self, ctx: RunContext) -> None:
        """Work that needs no host facts (asking a registry): the runner runs it while it gathers them."""

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        """One plan per reached host; steps deciding for the cluster override this."""
        return {h: self.plan_host(ctx, h) for h in self.hosts(ctx.inventory) if h in ctx.facts}

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        raise NotImplementedError

    def verify(self, ctx: RunContext, host: str, changed: bool) -> str:
        """The proof on `host`, after every host applied, of what the step changed (a step that has
        one overrides this; the runner calls only those)."""
        raise NotImplementedError

    def compensate(self, ctx: RunContext) -> Optional[str]:
        """Undo what this run left that nothing after a failed run will set right (runner.compensate
        calls it, last step first, when the command says no further run comes); a note for the
        operator, or None when there was nothing to undo."""
        return None

    def apply(self, ctx: RunContext, plan: Plan) -> "str | tuple[str, bool]":
        """Perform exactly the plan's operations; return a one-line summary (or (summary, changed)
        when applying found nothing actually needed changing). Raise SparkctlError to fail."""
        raise NotImplementedError

    # helpers for subclasses
    def noop(self, host: str, reason: str) -> Plan:
        return Plan(self.name, host, (), reason)

    def changes(self, host: str, changes: list[Change], reason: str = "") -> Plan:
        return Plan(self.name, host, tuple(changes), reason or "; ".join(c.summary for c in changes))

    def blocked(self, host: str, why: str) -> Plan:
        return Plan(self.name, host, blocked=why)
