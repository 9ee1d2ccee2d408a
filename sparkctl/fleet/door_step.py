"""The fleet's front door on its host: container `sparkctl-fleet-door` (`python -m sparkctl.fleetdoor`),
host network, on the door member's head in its runtime.image (or front_door.image), or on a host
of its own (front_door.host) in front_door.image, listening on front_door.port, every member of
the fleet behind it (its public URL: its gateway; its engine's URL: /health there says whether
the engine itself is up).

`FrontDoorStep` is facts -> plan -> apply like the gateway step (steps/gateway.py): its code is
shipped from this sparkctl to a content-addressed directory on the host, and the container
restarts only when its launch changes (the members, the port, the image, the code). A run with
nothing to change plans nothing and says why. `ensure_front_door(fleet, check, progress)` runs it
over a session of its own to the door's host (fleet/door_host.py): what `fleet up` calls after
every member is up. Its image is pulled there when the host lacks it.

The door's container carries its own labels (io.sparkctl.fleet, role fleet-door), never the
member's io.sparkctl.cluster: the member's own `up`/`down` neither see it nor restart it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Callable

from sparkctl.errors import HostError
from sparkctl.fleet.door_host import door_inventory, door_session
from sparkctl.fleetdoor import placement
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet
    from sparkctl.runner import Recap
    from sparkctl.runtime.launch import ContainerSpec

WAIT_S = 60.0  # the door answers within a second or two of its start (it probes each member once first)
STOP_GRACE = 10  # seconds in-flight requests may still run on SIGTERM
FLEET_LABEL = "io.sparkctl.fleet"


# --- the launch ----------------------------------------------------------------------------------


def launch(fleet: "Fleet") -> "ContainerSpec":
    """The door's container: pure (the fleet alone), so the same fleet always renders the same config hash."""
    from sparkctl.fleet import door_code
    from sparkctl.runtime.health import base_url, public_url
    from sparkctl.runtime.launch import LABEL_PREFIX, LAUNCHER, ContainerSpec, Mount, _hash

    _, host = door_inventory(fleet)
    cmd = ["python3", "-m", "sparkctl.fleetdoor", "--listen", f"0.0.0.0:{fleet.front_door.port}",
           "--admin-socket", placement.ADMIN_SOCKET, "--shutdown-timeout-s", str(STOP_GRACE)]  # fmt: skip
    for member in fleet.members:
        cmd += ["--member", f"{member.name}={public_url(member.inventory)},{base_url(member.inventory)}"]
    node = dict(
        host=host, role=placement.ROLE, image=fleet.front_door_image, launcher=LAUNCHER, command=cmd,
        env={"PYTHONPATH": placement.CONTAINER_CODE, "PYTHONUNBUFFERED": "1"},
        mounts=[Mount(source=door_code.directory(), target=placement.CONTAINER_CODE, read_only=True),
                Mount(source=placement.ADMIN_DIR, target=placement.ADMIN_DIR)],
    )  # fmt: skip
    return ContainerSpec(
        **node,
        name=placement.CONTAINER,
        devices=[],
        gpus="none",
        stop_timeout=STOP_GRACE + 5,
        ulimits={},
        labels={
            FLEET_LABEL: fleet.name,
            f"{LABEL_PREFIX}.role": placement.ROLE,
            f"{LABEL_PREFIX}.config-hash": _hash({"fleet": fleet.name, "door": node}),
        },
    )


# --- the step ------------------------------------------------------------------------------------


class FrontDoorStep(Step):
    """Runs with RunContext.options["fleet"] (the Fleet) on the door's inventory (fleet/door_host.py)."""

    name = "front_door"
    facts = frozenset({"fleet_door", "fleet_door_code", "image"})  # facts/fleet_door.py, facts/docker.py

    def hosts(self, inv: Inventory) -> list[str]:
        return inv.hosts_with_role("head")[:1]

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        from sparkctl.fleet import door_code

        f = ctx.facts[host]
        if f.fleet_door is None:
            return self.blocked(host, f"cannot inspect {placement.CONTAINER}: {f.errors.get('fleet_door', 'no answer')}")
        spec = launch(ctx.options["fleet"])
        want = spec.labels["io.sparkctl.config-hash"]
        running = f.fleet_door or None
        ops = []
        if f.fleet_door_code is not True:
            ops.append(
                Change("ship-code", f"copy the fleet door's code ({len(door_code.files())} files) to {door_code.directory()}")
            )
        if running is None:
            why = f"{spec.name} not on {host}"
        elif not running.running:
            why = f"{spec.name} on {host} is {running.status}"
        elif running.config_hash != want:
            why = f"{spec.name} on {host} runs config {running.config_hash[:12] or '(none)'}"
        else:
            why = None
        port = ctx.options["fleet"].front_door.port
        members = ", ".join(m.name for m in ctx.options["fleet"].members)
        if why:
            ops += [Change("start", f"start {spec.name} with config {want} on :{port} in {spec.image}, members {members}"),
                    Change("wait-door", f"wait until it answers on :{port}")]  # fmt: skip
        if not ops:
            return self.noop(host, f"{spec.name} running config {want} on :{port} (members {members})")
        return self.changes(host, ops, reason=why or "")

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        done = []
        for c in plan.changes:
            if c.action == "ship-code":
                done.append(self._ship(ctx, plan.host))
            elif c.action == "start":
                done.append(self._start(ctx, plan.host))
            elif c.action == "wait-door":
                done.append(self._wait(ctx, plan.host))
        return "; ".join(done)

    def _ship(self, ctx: RunContext, host: str) -> str:
        from sparkctl.fleet import door_code
        from sparkctl.runtime.code_ship import ship

        files, final = door_code.files(), door_code.directory()
        ship(ctx.fleet[host], host, files, final, placement.CODE_ROOT, door_code.COMPLETE, "the fleet door's code")
        return f"fleet door code {door_code.code_hash()} in {final} ({len(files)} files)"

    def _start(self, ctx: RunContext, host: str) -> str:
        from sparkctl.steps.runtime import start_container

        spec = launch(ctx.options["fleet"])
        self._image(ctx, host, spec.image)
        ctx.progress(host, self.name, f"starting {spec.name}")
        # the admin socket's directory: root only (docker would create a missing bind source 0755)
        r = ctx.fleet[host].run(f"mkdir -p {placement.ADMIN_DIR} && chmod 0700 {placement.ADMIN_DIR}")
        if not r.ok:
            raise HostError(f"{host}: cannot create {placement.ADMIN_DIR}: {r.stderr.strip()}", fix=f"check /run on {host}")
        return start_container(ctx, host, spec)

    def _image(self, ctx: RunContext, host: str, ref: str) -> None:
        """The door's image on its host: there already (a member's head holds its runtime.image), else
        pulled as the images step pulls; one that cannot be is named with the fix."""
        from sparkctl.steps.images import ImagesStep
        from sparkctl.transport.images import stored_image

        session = ctx.fleet[host]
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
        """Its own metrics page answers on the public port (it always answers, members up or not)."""
        from sparkctl.runtime.containers import wait_answering
        from sparkctl.transport.guard import check_url

        fleet = ctx.options["fleet"]
        check_url(fleet.front_door_url, "the fleet's front door")
        fix = f"read `docker logs {placement.CONTAINER}` on {host}; is front_door.port {fleet.front_door.port} free there?"
        url = fleet.front_door_url + placement.METRICS_PATH
        took = wait_answering(ctx.fleet[host].docker(), host, placement.CONTAINER, url, WAIT_S, fix)
        return f"fleet door answers on {fleet.front_door_url} after {took:.1f} s"


def ensure_front_door(
    fleet: "Fleet", check: bool = False, progress: Callable[[str, str, str], None] = lambda host, step, text: None
) -> "Recap":
    """Plan (and unless `check`, apply) the door on its host (the door member's head, or a host of
    its own), over an SSH session of its own. The recap's `plans` are what `--check` prints; `recap.failed` says whether it worked."""
    from sparkctl.runner import PlaybookStep, Stage, run_playbook

    with door_session(fleet, early=True) as (sessions, host):
        ctx = RunContext(
            inventory=sessions.inventory, fleet=sessions, check_mode=check, options={"fleet": fleet}, progress=progress
        )
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


def describe(fleet: "Fleet") -> str:
    """The door's launch as `docker run` (for `render`-like output)."""
    return launch(fleet).docker_run()
