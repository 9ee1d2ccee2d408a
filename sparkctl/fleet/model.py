"""The fleet file: several clusters (each one of today's inventories) behind one front door.

    fleet: {name: lab-fleet}
    members:                       # listed order = rollout order
      - inventory: inventory.yaml  # relative to the fleet file's folder
      - inventory: inventory-2.yaml
    front_door:
      member: lab                  # on this member's head (or host: {address, ...} + image:)
      port: 8890                   # the fleet's URL: vllm-router, the members' front doors its workers
      router: {policy: cache_aware}   # vllm-router's knobs (fleet/router_launch.py; docs/fleets.md)
    rollout: {max_unavailable: 1, stop_on_failure: true}

`load_fleet` validates the whole file, every member's inventory and the rules between them before
anything touches a host: every problem is named with its file, line and field (exit 2), as for an
inventory. A member's name is its inventory's `cluster.name`.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Iterator, Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from sparkctl.errors import InputError
from sparkctl.inventory.models import SSH, Cluster, ImageRef, Inventory
from sparkctl.inventory.problems import InventoryError, Problem, from_validation_error

FLEET_ENV = "SPARKCTL_FLEET"
DEFAULT_DOOR_PORT = 8890
WHEEL_ARCHES = ("x86_64", "aarch64")  # the platforms vllm-router publishes wheels for (DGX Spark: aarch64)


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class FleetName(_Section):
    name: str = Field(..., pattern=Cluster.model_fields["name"].metadata[0].pattern, description="Short name of the fleet.")


class MemberRef(_Section):
    inventory: Path = Field(..., description="The member cluster's inventory (relative: to the fleet file's folder).")


class Router(_Section):
    """vllm-router's own knobs that users need (its flags of the same names, `vllm-router --help`);
    a knob left out is the router's default. sparkctl passes the members' front doors as its
    workers, the port, the metrics port and the health and start-up timing the rollout relies on."""

    policy: Literal["cache_aware", "consistent_hash", "power_of_two", "round_robin", "random"] = Field(
        "cache_aware",
        description="How a request picks a member: cache_aware (by prompt prefix, so a conversation's turns "
        "meet their cached prefix), consistent_hash (by the X-Session-ID or X-User-ID header clients send), "
        "power_of_two (the less loaded of two), round_robin, random.",
    )
    wheel: Optional[Path] = Field(
        None,
        description="vllm-router's wheel for the door host's architecture, on this machine (relative: to the fleet "
        "file's folder; `pip download --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 vllm-router`). "
        "sparkctl ships it to the host (no internet needed there); without it, the image must carry vllm-router.",
    )
    cache_threshold: Optional[float] = Field(
        None, ge=0, le=1, description="cache_aware: the share of a prompt a member's cached prefix must match to get it."
    )
    balance_abs_threshold: Optional[int] = Field(
        None,
        ge=0,
        description="cache_aware: requests in flight by which the busiest member must lead the idlest before "
        "the idlest gets a request whatever its prefix (default: the smallest member's runtime.max_num_seqs; the "
        "router's own, 64, leaves a second pair idle until the first has 64 more requests than it).",
    )
    balance_rel_threshold: Optional[float] = Field(
        None, ge=1, description="cache_aware: ... and by this factor (the router's default 1.5)."
    )
    max_concurrent_requests: Optional[int] = Field(None, ge=1, description="Requests the router runs at once.")
    queue_size: Optional[int] = Field(None, ge=0, description="Requests that wait beyond those (then 429).")
    queue_timeout_secs: Optional[int] = Field(None, ge=1, description="How long one may wait in that queue.")
    max_payload_size: Optional[int] = Field(
        None, ge=1024, description="Largest request body in bytes (default: the members' smallest gateway.max_body_bytes)."
    )
    request_timeout_secs: Optional[int] = Field(None, ge=1, description="Deadline of one request at a member.")
    retry_max_retries: Optional[int] = Field(None, ge=0, description="Retries of a request a member failed (408/429/5xx).")
    cb_failure_threshold: Optional[int] = Field(None, ge=1, description="Failures that open a member's circuit.")
    cb_timeout_duration_secs: int = Field(
        5,
        ge=1,
        le=3600,
        description="How long an open circuit stays open (the router's own 60 s would keep a member "
        "that serves again out for a minute after its health checks pass).",
    )
    health_check_interval_secs: int = Field(
        2,
        ge=1,
        le=300,
        description="How often the router asks each member's /health (a dead member leaves within "
        "interval x health_failure_threshold).",
    )
    health_failure_threshold: int = Field(2, ge=1, le=100, description="Failed health checks that take a member out.")


class FrontDoor(_Section):
    """Where the fleet's front door (vllm-router) runs: on one member's head, or on a host of its own."""

    member: Optional[str] = Field(None, description="Run it on this member's head (its cluster.name).")
    host: Optional[SSH] = Field(None, description="Or on a host of its own: how sparkctl reaches it over SSH.")
    image: Optional[ImageRef] = Field(
        None, description="Image to run it in (default: the member's runtime.image; required with host)."
    )
    port: int = Field(DEFAULT_DOOR_PORT, ge=1, le=65535, description="The port clients use: the fleet's one URL.")
    metrics_port: Optional[int] = Field(
        None, ge=1, le=65535, description="The router's Prometheus page (default: port + 1); sparkctl reads its loads there."
    )
    router: Router = Field(default_factory=Router, description="vllm-router's policy and knobs.")

    @property
    def router_metrics_port(self) -> int:
        return self.metrics_port or self.port + 1

    @property
    def own_host(self) -> SSH:
        """The host of its own, where no member is named (validation: exactly one of the two)."""
        if self.host is None:
            raise ValueError(f"front_door runs on member {self.member}'s head, not a host of its own")
        return self.host


class Rollout(_Section):
    max_unavailable: int = Field(1, ge=1, description="Members changed at once during a rolling reload or restart.")
    stop_on_failure: bool = Field(
        True, description="Stop the rollout at the first member that fails (it is rolled back; the rest stay as they are)."
    )


class FleetFile(_Section):
    fleet: FleetName
    members: list[MemberRef] = Field(..., min_length=1, description="The member clusters, in rollout order.")
    front_door: FrontDoor = Field(..., description="The fleet's front door.")
    rollout: Rollout = Field(default_factory=Rollout, description="How `fleet reload` and `fleet restart` roll.")


class Member:
    """One member cluster: its name (cluster.name), inventory file and validated inventory."""

    def __init__(self, inventory_path: Path, inventory: Inventory):
        self.inventory_path = inventory_path
        self.inventory = inventory

    @property
    def name(self) -> str:
        return self.inventory.cluster.name

    @property
    def head(self) -> str:
        return self.inventory.hosts_with_role("head")[0]

    @property
    def head_address(self) -> str:
        return self.inventory.hosts[self.head].ssh.address

    def __repr__(self) -> str:
        return f"Member({self.name!r}, {str(self.inventory_path)!r})"


class Fleet(BaseModel):
    """A validated fleet file with its members' inventories loaded."""

    model_config = ConfigDict(arbitrary_types_allowed=True, frozen=True)

    name: str
    path: Path
    members: list[Member]
    front_door: FrontDoor
    rollout: Rollout
    _by_name: dict = PrivateAttr(default_factory=dict)

    def model_post_init(self, _context) -> None:
        self._by_name.update({m.name: m for m in self.members})

    def member(self, name: str) -> Member:
        try:
            return self._by_name[name]
        except KeyError:
            raise InputError(f"fleet {self.name} has no member {name!r}", fix=f"members: {', '.join(self._by_name)}") from None

    @property
    def door_member(self) -> Optional[Member]:
        return self.member(self.front_door.member) if self.front_door.member else None

    @property
    def front_door_address(self) -> str:
        door = self.door_member
        return door.head_address if door else self.front_door.own_host.address

    @property
    def front_door_image(self) -> str:
        """The image the door runs in: front_door.image, else the door member's runtime.image."""
        door = self.door_member
        if self.front_door.image or door is None:  # validation requires the image with a host of its own
            return str(self.front_door.image)
        return door.inventory.runtime.image

    @property
    def front_door_url(self) -> str:
        return f"http://{self.front_door_address}:{self.front_door.port}"

    @property
    def router_metrics_url(self) -> str:
        return f"http://{self.front_door_address}:{self.front_door.router_metrics_port}/metrics"

    @property
    def router_wheel(self) -> Optional[Path]:
        """front_door.router.wheel, relative to the fleet file's folder."""
        wheel = self.front_door.router.wheel
        return self.path.parent / wheel.expanduser() if wheel is not None else None


class FleetError(InventoryError):
    """A fleet file that cannot be used: every problem, one line each (exit 2)."""

    def __init__(self, file, problems: list[Problem], fix: Optional[str] = None):
        super().__init__(file, problems, fix=fix or "correct the fields named above (docs/fleets.md describes the fleet file)")
        if not (len(problems) == 1 and not problems[0].path):
            count = f"{len(problems)} problem{'s' if len(problems) != 1 else ''}"
            self.message = f"fleet file {file} is invalid ({count}):\n" + "\n".join("  " + p.render(file) for p in problems)
            self.args = (self.message,)


def fleet_path(option: Optional[Path]) -> Path:
    """-f/--fleet, else $SPARKCTL_FLEET; neither is a usage error that says both."""
    if option is not None:
        return option
    env = os.environ.get(FLEET_ENV, "").strip()
    if env:
        return Path(env)
    raise InputError(
        "no fleet file: pass -f/--fleet FILE or set $SPARKCTL_FLEET",
        fix="e.g. `sparkctl fleet status -f fleet.yaml` (the lab writes /var/lib/sparkctl-lab/fleet.yaml: "
        "`sparkctl lab up --clusters 2`)",
    )


def load_fleet(path: Path | str) -> Fleet:
    """The validated fleet, its members' inventories loaded; every problem raises FleetError (exit 2)."""
    from pydantic import ValidationError

    from sparkctl.inventory.loader import _fail, read_text
    from sparkctl.inventory.safe_yaml import YamlProblem, parse

    path = Path(path)
    try:
        text = read_text(path)
    except InventoryError:
        raise
    except InputError as err:  # missing, unreadable, not a regular file: said of the fleet file, not an inventory
        if not path.exists():
            raise InputError(
                f"fleet file {path} does not exist",
                fix="check the path (docs/fleets.md describes the file; `sparkctl lab up --clusters 2` writes the "
                "lab's /var/lib/sparkctl-lab/fleet.yaml)",
            ) from None
        raise err.reworded(
            err.message.replace("an inventory file", "a fleet file").replace("inventory file", "fleet file")
        ) from None
    try:
        data, locations = parse(text)
    except YamlProblem as err:
        raise FleetError(path, [Problem((), err.message, line=err.line, column=err.column)]) from None
    if not isinstance(data, dict):
        _fail(path, "the top level must be a mapping (fleet:, members:, front_door:, rollout:)", line=1)
    try:
        doc = FleetFile.model_validate(data)
    except ValidationError as err:
        raise FleetError(path, [p.located(locations) for p in from_validation_error(err, FleetFile)]) from None

    problems: list[Problem] = []
    members: list[Member] = []
    for i, ref in enumerate(doc.members):
        inv_path = path.parent / ref.inventory.expanduser()
        try:
            from sparkctl.inventory.loader import load_inventory

            members.append(Member(inv_path, load_inventory(inv_path)))
        except InventoryError as err:  # the member's own problems, each naming its file, line and field
            problems += [
                Problem(("members", i, "inventory"), f"not a valid inventory: {p.render(err.file)}") for p in err.problems
            ]
        except InputError as err:  # missing, unreadable, not a file
            problems.append(Problem(("members", i, "inventory"), err.message))
    if not problems:
        problems += list(_rules(doc, members, path))
    if problems:
        raise FleetError(path, [p.located(locations) for p in problems])
    return Fleet(name=doc.fleet.name, path=path, members=members, front_door=doc.front_door, rollout=doc.rollout)


def _wheel_problems(doc: FleetFile, path: Path) -> Iterator[Problem]:
    """front_door.router.wheel: a file here, named as vllm-router's wheels are, for a Spark's or a PC's architecture."""
    wheel = doc.front_door.router.wheel
    if wheel is None:
        return
    where, found = ("front_door", "router", "wheel"), path.parent / wheel.expanduser()
    get = "`pip download --no-deps --only-binary=:all: --platform manylinux_2_28_aarch64 vllm-router` (x86_64 likewise)"
    if not found.is_file():
        yield Problem(where, f"{found} is not a file; download the router's wheel with {get}")
    elif not (found.name.startswith("vllm_router-") and found.name.endswith(".whl")):
        yield Problem(
            where, f"{found.name} is not a vllm-router wheel (vllm_router-VERSION-...-PLATFORM.whl); get one with {get}"
        )
    elif wheel_arch(found.name) is None:
        yield Problem(where, f"{found.name} is built for none of {', '.join(WHEEL_ARCHES)}; get one with {get}")


def wheel_arch(name: str) -> Optional[str]:
    """The architecture a wheel's platform tag names (x86_64, aarch64), None for any other."""
    platform = name.removesuffix(".whl").split("-")[-1]
    return next((a for a in WHEEL_ARCHES if platform.endswith(a)), None)


def _rules(doc: FleetFile, members: list[Member], path: Path) -> Iterator[Problem]:
    """Between the members: names and hosts are one member's own; the door has one place."""
    seen_name: dict[str, int] = {}
    seen_address: dict[str, tuple[int, str]] = {}
    for i, m in enumerate(members):
        where = ("members", i, "inventory")
        if m.name in seen_name:
            yield Problem(
                where,
                f"cluster name {m.name!r} is also member {seen_name[m.name]}'s; each member needs its own cluster.name "
                "(its history, lock and metrics are kept under it)",
            )
        seen_name.setdefault(m.name, i)
        # management addresses: a host (or an address) in two members would be changed twice by
        # one rollout. Fabric rails are each pair's own direct cables, so their subnets may repeat.
        for host, h in m.inventory.hosts.items():
            a = h.ssh.address
            if a in seen_address and seen_address[a][0] != i:
                j, other = seen_address[a]
                yield Problem(
                    where,
                    f"host {host} ({a}) is also host {other} of member {members[j].name}; a host belongs to one member",
                )
            seen_address.setdefault(a, (i, host))
    from sparkctl.fleet import keys

    yield from keys.problems(members)
    fd = doc.front_door
    yield from _wheel_problems(doc, path)
    if fd.router_metrics_port == fd.port:
        yield Problem(
            ("front_door", "metrics_port"), f"{fd.port} is front_door.port; the router's metrics need a port of their own"
        )
    if (fd.member is None) == (fd.host is None):
        yield Problem(("front_door",), "name exactly one of member (run it on that member's head) or host (a host of its own)")
    elif fd.member is not None:
        by_name = {m.name: m for m in members}
        if fd.member not in by_name:
            yield Problem(("front_door", "member"), f"{fd.member!r} is not a member; members: {', '.join(by_name)}")
        else:
            m = by_name[fd.member]
            taken = _ports_on(m, m.head)
            for field, port in (("port", fd.port), ("metrics_port", fd.router_metrics_port)):
                if port in taken:
                    yield Problem(
                        ("front_door", field),
                        f"{port} is {taken[port]} on member {fd.member}'s head; pick a free port (e.g. 8890)",
                    )
    elif fd.image is None:
        yield Problem(("front_door", "image"), "a front door on a host of its own needs the image it runs in")
    else:
        # a host of its own may still be a member's host (e.g. an offload host): its ports there are taken
        for m in members:
            for host, h in m.inventory.hosts.items():
                taken = _ports_on(m, host) if h.ssh.address == fd.own_host.address else {}
                for field, port in (("port", fd.port), ("metrics_port", fd.router_metrics_port)):
                    if port in taken:
                        yield Problem(
                            ("front_door", field),
                            f"{port} is {taken[port]} on {fd.own_host.address} (host {host} of member {m.name}); "
                            "pick a free port (e.g. 8890)",
                        )


def _ports_on(member: Member, host: str) -> dict[int, str]:
    """The ports a member's containers listen on, on one of its hosts (host network): what the door's port must avoid."""
    from sparkctl.launch.names import RAY_PORT

    inv = member.inventory
    taken: dict[int, str] = {}
    if inv.hosts[host].role == "head":
        taken = {inv.runtime.port: "its runtime.port", RAY_PORT: "Ray's GCS port"}
        if inv.gateway.enabled:
            taken[inv.gateway.engine_port] = "its gateway.engine_port"
    spec = inv.runtime.speculative
    if spec is not None and spec.drafter_host == host:
        taken[spec.drafter_port] = "its runtime.speculative.drafter_port"
    return taken
