"""What a check is: a small pure function over the inventory and every host's facts.

A check has a stable name (`fabric.mtu`), a group (`fabric`), and returns `Finding`s; the
registry turns them into `CheckResult`s carrying name, host, status, message, fix and runbook.
Checks never touch a host and never print: unit tests feed them recorded facts.

Two shapes:
- `@host_check`: called once per host in its scope that was reached, `fn(ctx, host, facts)`;
- `@cluster_check`: compares hosts, called once, `fn(ctx) -> {host: [Finding]}`.
A host that could not be reached gets `skipped` for every check in scope (ssh.reachable says why).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Callable, Iterable, Literal, Optional

from sparkctl.inventory.models import Inventory

Status = Literal["ok", "warn", "fail", "skipped"]
STATUSES: tuple[Status, ...] = ("ok", "warn", "fail", "skipped")


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
    return Finding("fail", message, fix, target, data)


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
        d: dict[str, Any] = {
            "name": self.name,
            "group": self.group,
            "host": self.host,
            "status": self.status,
            "message": self.message,
            "fix": self.fix,
        }
        if self.target:
            d["target"] = self.target
        if self.runbook:
            d["runbook"] = self.runbook
        if self.data:
            d["data"] = self.data
        return d


@dataclass
class Context:
    """Everything checks may read. Built once per doctor run; never changed by a check."""

    inventory: Inventory
    hosts: list[str]  # hosts this run looks at (--hosts), inventory order
    facts: dict[str, Any]  # host -> HostFacts, only for hosts that were reached
    unreachable: dict[str, "Unreachable"] = field(default_factory=dict)
    endpoint: Any = None  # EndpointFacts of the head's API, None when not fetched
    bandwidth: dict[str, Any] = field(default_factory=dict)  # "host/device" -> BandwidthResult (--deep)
    deep: bool = False
    allow_loading: bool = False  # a runtime still loading is a warning, not a failure (doctor --allow-loading)
    _plan: Any = None

    @property
    def plan(self):
        """The rendered launch (pure), or None when this inventory cannot be rendered."""
        if self._plan is None:
            from sparkctl.runtime.launch import render

            try:
                self._plan = render(self.inventory)
            except Exception:
                self._plan = False
        return self._plan or None

    def role(self, host: str) -> str:
        return self.inventory.hosts[host].role


@dataclass(frozen=True)
class Unreachable:
    """Why a host gave no facts: connect (no session), host_key (refused its key), auth, error."""

    message: str
    fix: Optional[str]
    kind: str = "connect"


Scope = Callable[[Context], Iterable[str]]


def all_hosts(ctx: Context) -> list[str]:
    return list(ctx.hosts)


@dataclass(frozen=True)
class Check:
    name: str
    group: str
    doc: str  # one line for docs/checks.md and --help
    fn: Callable
    cluster: bool = False
    scope: Scope = all_hosts
    runbook: bool = False
    deep_only: bool = False
    needs_reach: bool = True  # skipped on unreachable hosts

    @property
    def runbook_path(self) -> Optional[str]:
        """docs/runbooks/<name>.md when the check says it has one or the package ships it."""
        has = self.runbook or _runbook_exists(self.name)
        return f"docs/runbooks/{self.name}.md" if has else None

    def run(self, ctx: Context) -> list[CheckResult]:
        hosts = [h for h in ctx.hosts if h in set(self.scope(ctx))]
        per_host: dict[str, list[Finding]] = {}
        if self.needs_reach:
            for h in hosts:
                if h not in ctx.facts:
                    per_host[h] = [skipped("host not reached (see ssh.reachable)")]
        targets = [h for h in hosts if h in ctx.facts or not self.needs_reach]
        if self.cluster:
            found = self.fn(ctx) or {}
            for h in targets:
                if h in found:
                    per_host[h] = list(found[h])
        else:
            for h in targets:
                per_host[h] = list(self.fn(ctx, h, ctx.facts.get(h)) or [])
        out = []
        for h in hosts:
            for f in per_host.get(h, []):
                out.append(
                    CheckResult(
                        self.name, self.group, h, f.status, f.message, f.fix, f.target,
                        self.runbook_path if f.status in ("fail", "warn") else None, dict(f.data),
                    )
                )  # fmt: skip
        return out


REGISTRY: dict[str, Check] = {}


def _runbook_exists(name: str) -> bool:
    from sparkctl.resources import data_dir

    return (data_dir("runbooks") / f"{name}.md").is_file()


def _register(check: Check) -> Callable:
    if check.name in REGISTRY:
        raise ValueError(f"check {check.name} registered twice")
    if check.name.split(".", 1)[0] != check.group:
        raise ValueError(f"check {check.name} must start with its group {check.group}")
    REGISTRY[check.name] = check
    return check.fn


def host_check(name: str, doc: str, scope: Scope = all_hosts, runbook: bool = False, deep_only: bool = False):
    def deco(fn):
        return _register(Check(name, name.split(".")[0], doc, fn, False, scope, runbook, deep_only))

    return deco


def cluster_check(
    name: str, doc: str, scope: Scope = all_hosts, runbook: bool = False, deep_only: bool = False, needs_reach: bool = True
):
    def deco(fn):
        return _register(Check(name, name.split(".")[0], doc, fn, True, scope, runbook, deep_only, needs_reach))

    return deco
