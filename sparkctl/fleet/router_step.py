"""The fleet's front door on its host: vllm-router in container `sparkctl-fleet-door`
(fleet/router_launch.py says what it runs and from where).

`FrontDoorStep` is facts -> plan -> apply like the gateway step (steps/gateway.py): the router's
wheel, when the fleet file names one, is unpacked to a content-addressed directory on the host
(copied once; a wheel for another architecture than the host's blocks the plan before anything
changes), and the container restarts only when its launch changes (the members, the ports, the
policy and knobs, the image, the wheel). A run with nothing to change plans nothing and says why.
`ensure_front_door(fleet, check, progress)` runs it over a session of its own to the door's host
(fleet/router_host.py): what `fleet up` calls after every member is up. Its image is pulled there
when the host lacks it.

The door's container carries its own labels (io.sparkctl.fleet, role fleet-door), never the
member's io.sparkctl.cluster: the member's own `up`/`down` neither see it nor restart it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sparkctl.errors import HostError
from sparkctl.fleet import router_launch as placement
from sparkctl.fleet.router_host import door_session
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.steps.placed import START, WAIT, apply_changes, start_changes
from sparkctl.steps.transfer import Phase

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet
    from sparkctl.runner import Recap

WAIT_S = 60.0  # the router serves within ADD_WAIT_S of its start (it waits that long for a member that does not answer)


def _fleet(ctx: RunContext) -> Fleet:
    if ctx.fleet_spec is None:
        raise RuntimeError("the front door's step runs in a fleet's run (RunContext.fleet_spec)")
    return ctx.fleet_spec


class FrontDoorStep(Step):
    """Runs with RunContext.fleet_spec (the Fleet) on the door's inventory (fleet/router_host.py)."""

    name = "front_door"
    facts = frozenset({"fleet_door", "fleet_router_wheels", "image"})  # facts/fleet_door.py, facts/docker.py

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")[:1]

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        fleet = _fleet(ctx)
        f = ctx.facts[host]
        if f.fleet_door is None:
            return self.blocked(host, f"cannot inspect {placement.CONTAINER}: {f.errors.get('fleet_door', 'no answer')}")
        spec = placement.launch(fleet)
        want = spec.labels["io.sparkctl.config-hash"]
        ops = []
        wheel = fleet.router_wheel
        if wheel is not None:
            if f.fleet_router_wheels is None:
                return self.blocked(
                    host, f"cannot read {placement.WHEEL_ROOT}: {f.errors.get('fleet_router_wheels', 'no answer')}"
                )
            arch = placement.wheel_arch(fleet)
            if f.fleet_router_arch != arch:
                return self.blocked(
                    host,
                    f"front_door.router.wheel {wheel.name} is for {arch}, {host} is {f.fleet_router_arch}: download "
                    f"its wheel (`pip download --no-deps --only-binary=:all: --platform manylinux_2_28_{f.fleet_router_arch} "
                    "vllm-router`) and name it in the fleet file",
                )
            if placement.wheel_hash(wheel) not in f.fleet_router_wheels:
                ops.append(Change("ship-router", f"copy vllm-router from {wheel.name} to {placement.wheel_directory(wheel)}"))
        fd = fleet.front_door
        members = ", ".join(m.name for m in fleet.members)
        start = f"start vllm-router ({fd.router.policy}) as {spec.name} with config {want} on :{fd.port} in {spec.image}, members {members}"
        starts, why = start_changes(spec.name, host, f.fleet_door or None, want, start, fd.port)
        ops += starts
        if not ops:
            return self.noop(host, f"{spec.name} running config {want} on :{fd.port} (vllm-router, members {members})")
        return self.changes(host, ops, reason=why or "")

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        return apply_changes(ctx, plan, {"ship-router": self._ship, START: self._start, WAIT: self._wait})

    def _ship(self, ctx: RunContext, host: str) -> str:
        from sparkctl.runtime.code_ship import ship

        wheel = _fleet(ctx).router_wheel
        assert wheel is not None  # planned only when front_door.router.wheel names one
        files, final = placement.wheel_files(wheel), placement.wheel_directory(wheel)
        ship(ctx.session(host), host, files, final, placement.WHEEL_ROOT, "vllm-router's wheel")
        return f"vllm-router from {wheel.name} in {final} ({len(files)} files)"

    def _start(self, ctx: RunContext, host: str) -> str:
        from sparkctl.steps.runtime import start_container

        spec = placement.launch(_fleet(ctx))
        self._image(ctx, host, spec.image)
        ctx.progress(host, self.name, f"starting {spec.name}")
        return start_container(ctx, host, spec)

    def _image(self, ctx: RunContext, host: str, ref: str) -> None:
        """The door's image on its host: there already (a member's head holds its runtime.image), else
        pulled as the images step pulls; one that cannot be is named with the fix."""
        from sparkctl.steps.images import ImagesStep
        from sparkctl.transport.images import stored_image

        session = ctx.session(host)
        if stored_image(session, ref) is not None:
            return
        ctx.progress(host, self.name, f"{ref} is not on {host}: pulling it")
        try:
            ImagesStep()._pull(ctx, host, ref, ref)
        except HostError as err:
            raise HostError(
                f"{host} ({session.target.address}): the front door's image {ref} is not there and cannot be pulled: "
                f"{err.message}",
                fix=f"push {ref} to a registry {session.target.address} pulls from (or `docker load` it there), "
                "or set front_door.image to an image it holds",
            ) from None

    def _wait(self, ctx: RunContext, host: str) -> str:
        """The router's /liveness answers on the public port (it does, members up or not)."""
        from sparkctl.runtime.containers import wait_answering
        from sparkctl.transport.guard import check_url

        fleet = _fleet(ctx)
        check_url(fleet.front_door_url, "the fleet's front door")
        fix = (
            f"read `docker logs {placement.CONTAINER}` on {host}; are front_door.port {fleet.front_door.port} and "
            f"metrics_port {fleet.front_door.router_metrics_port} free there? No module named vllm_router: the image "
            "lacks vllm-router; name its wheel in front_door.router.wheel"
        )
        url = fleet.front_door_url + placement.LIVENESS_PATH
        took = wait_answering(ctx.session(host).docker(), host, placement.CONTAINER, url, WAIT_S, fix)
        return f"fleet door (vllm-router) answers on {fleet.front_door_url} after {took:.1f} s"


def ensure_front_door(
    fleet, check: bool = False, progress: Callable[[str, str, Phase], None] = lambda host, step, text: None
) -> "Recap":
    """Plan (and unless `check`, apply) the door on its host (the door member's head, or a host of
    its own), over an SSH session of its own. The recap's `plans` are what `--check` prints; `recap.failed` says whether it worked."""
    from sparkctl.runner import PlaybookStep, Stage, run_playbook

    with door_session(fleet, early=True) as (sessions, host):
        ctx = RunContext(inventory=sessions.inventory, fleet=sessions, check_mode=check, progress=progress, fleet_spec=fleet)
        return run_playbook(ctx, [Stage(PlaybookStep(step=FrontDoorStep.name), FrontDoorStep())], "fleet-door")


def plan_lines(recap: "Recap") -> list[str]:
    """The door's plan as an operator reads it (for `fleet up --check`)."""
    out = []
    for p in recap.plans:
        if p.blocked:
            out.append(f"front door on {p.host}: blocked: {p.blocked}")
        elif p.empty:
            out.append(f"front door on {p.host}: nothing to do ({p.reason})")
        else:
            out += [f"front door on {p.host}: {c.summary}" for c in p.changes]
    return out


def describe(fleet) -> str:
    """The door's launch as `docker run` (for `render`-like output)."""
    return placement.launch(fleet).docker_run()
