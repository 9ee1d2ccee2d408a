"""What a check is: a small pure function over the inventory and every host's facts.

A check has a stable name (`fabric.mtu`), a group (`fabric`), and returns `Finding`s; the
registry turns them into `CheckResult`s carrying name, host, status, message, fix and runbook.
Checks never touch a host and never print: unit tests feed them recorded facts.

Two shapes:
- `@host_check`: called once per host in its scope that was reached, `fn(ctx, host, facts)`
  returns its Finding, or yields one per target (rail, image, container);
- `@cluster_check`: compares hosts, called once, `fn(ctx) -> {host: Finding or [Finding]}`.
A host that could not be reached gets `skipped` for every check in scope (ssh.reachable says why).
- `@fleet_check`: between the members of a fleet (`sparkctl fleet doctor`), called once with the
  fleet's context (checks/fleet.py FleetContext), yields (member or "fleet", Finding); a cluster's
  doctor never runs it.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Callable, Iterable, Literal, Optional

from sparkctl.inventory.models import Inventory
from sparkctl.session import Unreachable  # a host that gave no facts, and why (its reason, message, fix)

if TYPE_CHECKING:
    from sparkctl.facts.bandwidth import BandwidthResult
    from sparkctl.facts.endpoint import EndpointFacts
    from sparkctl.facts.gateway import GatewayFacts
    from sparkctl.facts.host import HostFacts
    from sparkctl.launch.plan import ContainerSpec, LaunchPlan

# One word for a failure across sparkctl: a check `failed` as a step `failed` (and a reload's
# outcome, and the summary's failed_checks). Until schema 2 a check said `fail`.
Status = Literal["ok", "warn", "failed", "skipped"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "failed", "skipped")
# doctor --json's document: 2 = statuses and the summary's counts say "failed" (1, unversioned: "fail")
SCHEMA_VERSION = 2


@dataclass(frozen=True)
class Finding:
    status: Status
    message: str
    fix: Optional[str] = None
    target: Optional[str] = None  # what on the host: a rail, RDMA device, image, container
    data: dict[str, Any] = field(default_factory=dict)  # figures for --json (speeds, offsets, ...)


def ok(message: str, target: Optional[str] = None, **data: Any) -> Finding:
    return Finding("ok", message, target=target, data=data)


def warn(message: str, fix: Optional[str] = None, target: Optional[str] = None, **data: Any) -> Finding:
    return Finding("warn", message, fix, target, data)


def fail(message: str, fix: str, target: Optional[str] = None, **data: Any) -> Finding:
    return Finding("failed", message, fix, target, data)


def skipped(message: str, target: Optional[str] = None) -> Finding:
    return Finding("skipped", message, target=target)


@dataclass(frozen=True)
class CheckResult:
    name: str
    group: str
    host: str
    status: Status
    message: str
    fix: Optional[str] = None
    target: Optional[str] = None
    runbook: Optional[str] = None
    data: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict:
        # fix is always there (null when none); target, runbook and data only when set
        return {k: v for k, v in asdict(self).items() if v or k not in ("target", "runbook", "data")}


@dataclass
class Context:
    """Everything checks may read. Built once per doctor run; never changed by a check."""

    inventory: Inventory
    hosts: list[str]  # hosts this run looks at (--hosts), inventory order
    facts: dict[str, HostFacts]  # only for hosts that were reached
    unreachable: dict[str, Unreachable] = field(default_factory=dict)
    endpoint: Optional[EndpointFacts] = None  # the head's API, None when not fetched
    gateway: Optional[GatewayFacts] = None  # the front door on runtime.port, None when not fetched
    bandwidth: dict[str, BandwidthResult] = field(default_factory=dict)  # rail key "client/device" -> its iperf3
    deep: bool = False
    allow_loading: bool = False  # a runtime still loading is a warning, not a failure (doctor --allow-loading)

    @property
    def plan(self) -> Optional[LaunchPlan]:
        """The rendered launch (launch.render keeps it, once per inventory), or None when this
        inventory cannot be rendered."""
        from sparkctl.launch.plan import render

        try:
            return render(self.inventory)
        except Exception:
            return None

    def launch_on(self, host: str) -> list[ContainerSpec]:
        """The launch's container specs on host ([] when the inventory cannot be rendered)."""
        return self.plan.for_host(host) if self.plan else []

    def role(self, host: str) -> str:
        return self.inventory.hosts[host].role


Scope = Callable[[Context], Iterable[str]]


def all_hosts(ctx: Context) -> list[str]:
    return list(ctx.hosts)


def head_host(ctx: Context) -> list[str]:
    return [h for h in ctx.inventory.hosts_with_role("head") if h in ctx.hosts]


@dataclass(frozen=True)
class Check:
    name: str
    doc: str  # one line for docs/checks.md and --help
    fn: Callable
    cluster: bool = False
    scope: Scope = all_hosts
    runbook: bool = False
    deep_only: bool = False
    needs_reach: bool = True  # skipped on unreachable hosts
    fleet: bool = False  # a fleet check: `sparkctl fleet doctor` runs it, never a cluster's doctor

    @property
    def group(self) -> str:
        return self.name.split(".", 1)[0]

    @property
    def runbook_path(self) -> Optional[str]:
        """docs/runbooks/<name>.md when the check says it has one or the package ships it."""
        from sparkctl import runbooks

        return runbooks.path(self.name) if self.runbook or runbooks.exists(self.name) else None

    def run(self, ctx: Context) -> list[CheckResult]:
        if self.fleet:  # ctx is the fleet's: each finding names its member (or the whole fleet)
            return [self._result(where, f) for where, f in self.fn(ctx)]
        found = self.fn(ctx) if self.cluster else {}
        in_scope = set(self.scope(ctx))
        out = []
        for h in [h for h in ctx.hosts if h in in_scope]:
            if self.needs_reach and h not in ctx.facts:
                findings: Iterable[Finding] = [skipped("host not reached (see ssh.reachable)")]
            else:
                findings = found.get(h, []) if self.cluster else self.fn(ctx, h, ctx.facts.get(h))
            if isinstance(findings, Finding):
                findings = [findings]
            out += [self._result(h, f) for f in findings]
        return out

    def _result(self, where: str, f: Finding) -> CheckResult:
        """A finding on `where` (a host, a fleet member, the fleet) as the check's result."""
        runbook = self.runbook_path if f.status in ("failed", "warn") else None
        return CheckResult(self.name, self.group, where, f.status, f.message, f.fix, f.target, runbook, dict(f.data))


REGISTRY: dict[str, Check] = {}


def _register(check: Check) -> Callable:
    if check.name in REGISTRY:
        raise ValueError(f"check {check.name} registered twice")
    REGISTRY[check.name] = check
    return check.fn


def host_check(name: str, doc: str, **options: Any) -> Callable:
    """Registers `fn(ctx, host, facts) -> Finding | Iterable[Finding]` as check `name`
    (its group is the part before the dot)."""
    return lambda fn: _register(Check(name, doc, fn, **options))


def cluster_check(name: str, doc: str, **options: Any) -> Callable:
    """Registers `fn(ctx) -> {host: Finding | Iterable[Finding]}` under `name`."""
    return lambda fn: _register(Check(name, doc, fn, cluster=True, **options))


def fleet_check(name: str, doc: str, **options: Any) -> Callable:
    """Registers `fn(fleet_ctx) -> Iterable[(member or "fleet", Finding)]` under `name` (group `fleet`)."""
    return lambda fn: _register(Check(name, doc, fn, fleet=True, **options))
