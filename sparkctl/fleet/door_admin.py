"""sparkctl's side of the fleet door's admin interface: drain, undrain and status over SSH to the
door's host (the door member's head or a host of its own: fleet/door_host.py), as
`docker exec sparkctl-fleet-door python3 -m sparkctl.fleetdoor.ctl ...`
(sparkctl/fleetdoor/ctl.py: one JSON document on stdout), each call with a deadline. The socket
is 0600 root in a 0700 directory on that host: nobody on the network reaches it.

    drain(fleet, "lab-2", wait_s=600)  new requests go to the other members; returns once lab-2 has
                                       nothing in flight at the door (DrainTimeout after wait_s)
    undrain(fleet, "lab-2")
    status(fleet) -> {"members": {NAME: {"state": "passing"|"drained"|"holding"|"failing",
                                         "outstanding": int, "requests": int, "errors": int,
                                         "reason": str, ...}}, "eligible": [...], "outstanding": int}
"""

from __future__ import annotations

import json
from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator, Optional

from sparkctl.errors import HostError
from sparkctl.fleetdoor.placement import CONTAINER

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet
    from sparkctl.transport.ssh import HostSession

ADMIN_TIMEOUT = 20.0  # docker exec, a python start in the container and one unix-socket request
CTL = ("docker", "exec", CONTAINER, "python3", "-m", "sparkctl.fleetdoor.ctl")
# docker's answers when there is no running container to exec in (moby daemon/exec.go, errdefs)
_ABSENT = ("No such container", "is not running", "is restarting", "is paused")
FIX_UP = "start it with `sparkctl fleet up`"


class DoorAbsent(HostError):
    """No front door container runs on the door's host."""


class DoorAdminError(HostError):
    """The door's container runs but its admin interface did not answer as it should."""


class DrainTimeout(HostError):
    """The member is drained at the door, but requests were still in flight on it after wait_s."""

    def __init__(self, message: str, in_flight: int, doc: dict, fix: Optional[str] = None):
        super().__init__(message, fix=fix)
        self.in_flight, self.doc = in_flight, doc


def call(session: "HostSession", *args: str, timeout: float = ADMIN_TIMEOUT, command: tuple[str, ...] = CTL) -> tuple[bool, dict]:
    """Run the door's ctl on `session`'s host: (exited 0, its JSON document). Raises when there is
    no door there or it answered no JSON object."""
    r = session.run([*command, *args], timeout=timeout)
    said = (r.stderr.strip() or r.stdout.strip())[:400]
    if not r.ok and any(s in r.stderr for s in _ABSENT):
        raise DoorAbsent(f"{session.name}: no {CONTAINER} running ({said})", fix=FIX_UP)
    try:
        doc = json.loads(r.stdout)
    except ValueError:
        doc = None
    if not isinstance(doc, dict):
        raise DoorAdminError(
            f"{session.name}: the fleet door's admin interface failed ({args[0]}, exit {r.exit_code}): {said}",
            fix=f"read `docker logs {CONTAINER}` on {session.name}; {FIX_UP} restarts it if its launch changed",
        )
    return r.ok, doc


def _checked(session: "HostSession", ok: bool, doc: dict, what: str) -> dict:
    if not ok:
        raise DoorAdminError(f"{session.name}: the fleet door refused {what}: {doc.get('error', doc)}")
    return doc


def drain(fleet: "Fleet", member: str, wait_s: float = 600.0, session: Optional["HostSession"] = None) -> dict:
    """New requests go to the other members; returns the door's status once `member` has nothing
    in flight there. DrainTimeout (naming how many are still in flight) after wait_s: the member
    then stays drained (undrain puts it back)."""
    fleet.member(member)  # InputError for a name the fleet lacks, before any host is touched
    with _maybe(fleet, session) as s:
        ok, doc = call(s, "drain", member, "--wait-s", f"{wait_s:g}", timeout=wait_s + ADMIN_TIMEOUT)
        if not ok and "in_flight" in doc:
            raise DrainTimeout(
                f"{s.name}: {member} is drained at the fleet door but {doc['in_flight']} request(s) are still in flight "
                f"on it after {wait_s:g} s",
                doc["in_flight"],
                doc,
                fix=f"wait longer (a larger wait), or `undrain` {member} to put it back",
            )
        return _checked(s, ok, doc, f"to drain {member}")


def undrain(fleet: "Fleet", member: str, session: Optional["HostSession"] = None) -> dict:
    fleet.member(member)
    with _maybe(fleet, session) as s:
        ok, doc = call(s, "undrain", member)
        return _checked(s, ok, doc, f"to undrain {member}")


def status(fleet: "Fleet", session: Optional["HostSession"] = None) -> dict:
    with _maybe(fleet, session) as s:
        ok, doc = call(s, "status")
        return _checked(s, ok, doc, "its status")


@contextmanager
def _maybe(fleet: "Fleet", session: Optional["HostSession"]) -> Iterator["HostSession"]:
    """The caller's session to the door's host (a rollout keeps one open), else one for this call."""
    if session is not None:
        yield session
    else:
        from sparkctl.fleet.door_host import door_session

        with door_session(fleet) as (sessions, host):
            yield sessions[host]
