"""Fleet door facts on a head: the door's container (`docker inspect sparkctl-fleet-door`) and
whether this sparkctl's door code is on the host (fleet/door_code.py). Read only when asked
(the fleet door step, fleet/door_step.py)."""

from __future__ import annotations

import shlex
from typing import Optional

from sparkctl.facts.base import Reading, fact


def _container_probe(t) -> Optional[str]:
    if t.host.role != "head":
        return None
    from sparkctl.fleetdoor.placement import CONTAINER

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


@fact(
    "fleet_door", _container_probe, background=True, fields={"fleet_door": None}
)  # its ContainerFact, False: none, None: not read
def _fleet_door(f, r: Reading) -> None:
    from sparkctl.facts.docker import parse_containers

    found, err = parse_containers(r.rc, r.out)
    if err:
        f.errors[r.key] = err
    else:
        f.fleet_door = found[0] if found else False


def _code_probe(t) -> Optional[str]:
    if t.host.role != "head":
        return None
    from sparkctl.fleet import door_code

    return f"test -f {shlex.quote(door_code.directory())}/{door_code.COMPLETE} && echo present || echo absent"


@fact("fleet_door_code", _code_probe, fields={"fleet_door_code": None})  # True / False, None: not read
def _fleet_door_code(f, r: Reading) -> None:
    out = r.out.strip()
    f.fleet_door_code = True if out == "present" else False if out == "absent" else None
