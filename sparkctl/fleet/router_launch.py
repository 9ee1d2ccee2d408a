"""The fleet's front door: vllm-router (vllm-project/router, the router vLLM's project ships) in a
container `sparkctl-fleet-door` on the door's host (the door member's head, or a host of its own),
host network, listening on front_door.port, the members' front doors (each member's public URL:
its gateway, or its engine when it has none) as its workers, its Prometheus page on
front_door.metrics_port (port + 1 by default).

Where its code comes from: the image runs `python3 -m vllm_router.launch_router`. vLLM's image
ships the router's Python requirements (vLLM 0.33's Requires-Dist: fastapi[standard], which brings
uvicorn, aiohttp, orjson, requests, setproctitle), not the router itself; so sparkctl ships it, as it ships the gateway's code: the fleet file's
front_door.router.wheel (the wheel for the host's architecture, downloaded on this machine:
nodes need no internet) is unpacked here and copied to a content-addressed directory on the host
(runtime/code_ship.py), mounted read-only and put on PYTHONPATH. Without a wheel, the image must
carry vllm-router (neither vLLM's nor the lab's does: the lab's fleet file names a wheel too).

The launch is pure (the fleet alone): the same fleet renders the same config hash, and the
container restarts only when it changes (members, ports, policy and knobs, image, wheel).
"""

from __future__ import annotations

import functools
import hashlib
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from sparkctl.launch.fleet_door import CONTAINER, FLEET_LABEL, ROLE, WHEEL_ROOT

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet
    from sparkctl.launch.plan import ContainerSpec

CONTAINER_WHEEL = "/opt/sparkctl-fleet-router"
LIVENESS_PATH = "/liveness"  # the router's own answer: "OK" once it serves, members up or not
STOP_GRACE = 10  # seconds in-flight requests may still run on SIGTERM
# how long the router waits for a member's /health before taking it (at its start, and on
# /add_worker: a member that does not serve by then is not added, so it stays out)
ADD_WAIT_S = 10


def launch(fleet: "Fleet") -> "ContainerSpec":
    """The router's container for `fleet`."""
    from sparkctl.fleet.router_host import door_inventory
    from sparkctl.launch.names import LABEL_PREFIX
    from sparkctl.launch.plan import LAUNCHER, ContainerSpec, Mount, _hash

    _, host = door_inventory(fleet)
    env = {"PYTHONUNBUFFERED": "1"}
    mounts = []
    if fleet.router_wheel is not None:
        env["PYTHONPATH"] = CONTAINER_WHEEL
        mounts.append(Mount(source=wheel_directory(fleet.router_wheel), target=CONTAINER_WHEEL, read_only=True))
    node = dict(
        host=host,
        role=ROLE,
        image=fleet.front_door_image,
        launcher=LAUNCHER,
        command=router_command(fleet),
        env=env,
        mounts=mounts,
    )
    return ContainerSpec(
        **node,
        name=CONTAINER,
        devices=[],
        gpus="none",
        stop_timeout=STOP_GRACE + 5,
        ulimits={},
        labels={
            FLEET_LABEL: fleet.name,
            f"{LABEL_PREFIX}.role": ROLE,
            f"{LABEL_PREFIX}.config-hash": _hash({"fleet": fleet.name, "router": node}),
        },
    )


def router_command(fleet: "Fleet") -> list[str]:
    """`vllm-router`'s argv: the members' front doors as workers, the fleet's ports, its policy and knobs."""
    fd, knobs = fleet.front_door, fleet.front_door.router
    cmd = [
        "python3",
        "-m",
        "vllm_router.launch_router",
        "--host",
        "0.0.0.0",
        "--port",
        str(fd.port),
        "--worker-urls",
        *worker_urls(fleet).values(),
        "--policy",
        knobs.policy,
        "--prometheus-host",
        "0.0.0.0",
        "--prometheus-port",
        str(fd.router_metrics_port),
        "--worker-startup-timeout-secs",
        str(ADD_WAIT_S),
        "--worker-startup-check-interval",
        "1",
        "--log-level",
        "warning",
    ]
    for name in type(knobs).model_fields:
        value = getattr(knobs, name)
        if name == "balance_abs_threshold" and value is None and knobs.policy == "cache_aware":
            # cache_aware sends every prefix miss to one member until the loads differ by this much:
            # by a full batch of the smallest member, not the router's 64, so a second pair works too
            value = min(m.inventory.runtime.max_num_seqs for m in fleet.members)
        if name == "max_payload_size" and value is None:
            value = members_body_limit(fleet)
        if name not in ("policy", "wheel") and value is not None:
            cmd += ["--" + name.replace("_", "-"), str(value)]
    return cmd


def members_body_limit(fleet: "Fleet") -> Optional[int]:
    """The smallest gateway.max_body_bytes of the members: the router's own limit (413) unless the
    fleet file sets one, so a body every member would refuse is refused before the router reads
    512 MB of it (its own default). None when no member has a gateway (vLLM sets no limit)."""
    limits = [m.inventory.gateway.max_body_bytes for m in fleet.members if m.inventory.gateway.enabled]
    return min(limits) if limits else None


def worker_urls(fleet: "Fleet") -> dict[str, str]:
    """Member name -> its front door's URL: the router's name for it (its worker)."""
    from sparkctl.runtime.health import public_url

    return {m.name: public_url(m.inventory) for m in fleet.members}


# --- the wheel ------------------------------------------------------------------------------------


@functools.lru_cache(maxsize=None)
def wheel_files(path: Path) -> dict[str, bytes]:
    """Relative path -> content of every file the wheel installs (a wheel is a zip of its
    site-packages tree; its .data scripts are not needed to import it)."""
    import zipfile

    with zipfile.ZipFile(path) as z:
        return {i.filename: z.read(i) for i in sorted(z.infolist(), key=lambda i: i.filename) if not i.is_dir()}


@functools.lru_cache(maxsize=None)
def wheel_hash(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            h.update(block)
    return h.hexdigest()[:16]


def wheel_directory(path: Path) -> str:
    return f"{WHEEL_ROOT}/{wheel_hash(path)}"


def wheel_arch(fleet: "Fleet") -> Optional[str]:
    from sparkctl.fleet.model import wheel_arch as arch_of

    return arch_of(fleet.router_wheel.name) if fleet.router_wheel is not None else None
