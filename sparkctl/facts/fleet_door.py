"""Fleet door facts on the door's host: the door's container (`docker inspect sparkctl-fleet-door`),
and the host's architecture with whether the fleet's vllm-router wheel is unpacked there
(launch/fleet_door.py names both). Read only when asked (the fleet door step, fleet/router_step.py)."""

from __future__ import annotations

import shlex
from typing import TYPE_CHECKING, Literal, Optional, Union

from sparkctl.facts.base import Reading, fact, host_fields

if TYPE_CHECKING:
    from sparkctl.facts.docker import ContainerFact
    from sparkctl.facts.host import HostFacts


def _container_probe(t) -> Optional[str]:
    if t.host.role != "head":
        return None
    from sparkctl.launch.fleet_door import CONTAINER

    name = shlex.quote(CONTAINER)
    # `docker inspect` of a missing container exits 1 (stdout "[]", stderr "Error: No such object:
    # NAME", docker 20.10 and 28 alike): the daemon answered, no door here. Any other failure is "no
    # door" only if `docker version` answers (a second CLI run, only then); else docker's own words
    return (
        f"out=$(docker inspect {name} 2>&1); rc=$?; "
        "case \"$out\" in *'No such object: '*) echo '[]'; exit 0;; esac; "
        "if [ $rc -ne 0 ] && docker version >/dev/null 2>&1; then echo '[]'; exit 0; fi; "
        'printf "%s\\n" "$out"; exit $rc'
    )


@host_fields
class FleetDoorFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    fleet_door: Union[ContainerFact, Literal[False], None] = None  # its ContainerFact, False: none, None: not read
    fleet_router_arch: Optional[str] = None  # the host's `uname -m`
    fleet_router_wheels: Optional[set[str]] = None  # the complete wheel directories, None: not read


@fact("fleet_door", _container_probe, background=True)  # its ContainerFact, False: none, None: not read
def _fleet_door(f: HostFacts, r: Reading) -> None:
    from sparkctl.facts.docker import parse_containers

    found, err = parse_containers(r.rc, r.out)
    if err:
        f.errors[r.key] = err
    else:
        f.fleet_door = found[0] if found else False


def _wheel_probe(t) -> Optional[str]:
    """`uname -m`, then whether each wheel directory under the router's root is complete (the step
    looks its own up: the fleet is not known to a fact)."""
    if t.host.role != "head":
        return None
    from sparkctl.launch.fleet_door import WHEEL_ROOT
    from sparkctl.launch.names import SHIPPED_COMPLETE

    root = shlex.quote(WHEEL_ROOT)
    return f'uname -m; for d in {root}/*/; do [ -f "$d{SHIPPED_COMPLETE}" ] && basename "$d"; done; true'


@fact("fleet_router_wheels", _wheel_probe)
def _fleet_router_wheels(f: HostFacts, r: Reading) -> None:
    """fleet_router_arch: the host's `uname -m`; fleet_router_wheels: the complete wheel directories (None: not read)."""
    lines = r.out.split()
    if r.rc != 0 or not lines:
        f.errors[r.key] = r.last_line()
        return
    f.fleet_router_arch, f.fleet_router_wheels = lines[0], set(lines[1:])
