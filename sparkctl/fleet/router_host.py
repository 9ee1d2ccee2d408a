"""Where the fleet's front door (vllm-router) runs and how sparkctl reaches it over SSH: the door
member's head (over that member's inventory), or a host of its own (the fleet file's `front_door.host`, the inventory's SSH
model: address, user, port, key, known_hosts, host_key_policy, ...; relative paths from the fleet
file's folder). The deploy step (fleet/router_step.py) and fleet doctor's probes go through
`door_session`, so past this module the two placements are one code path.
"""

from __future__ import annotations

from contextlib import contextmanager
from typing import TYPE_CHECKING, Iterator

if TYPE_CHECKING:
    from sparkctl.fleet.model import Fleet
    from sparkctl.inventory.models import Inventory
    from sparkctl.transport.ssh import Fleet as Sessions

DOOR_HOST = "door-host"  # what a host of its own is called in plans and messages (its address follows)


def door_inventory(fleet: "Fleet") -> tuple["Inventory", str]:
    """The inventory the door's host is reached through, and that host's name in it.

    A host of its own gets a one-host inventory: that host as its head (the door's facts are read
    on a head), no SSH defaults but its own block, its source the fleet file (so relative key and
    known_hosts paths resolve against the fleet file's folder, as an inventory's do against its own).
    Built without validation: it is never rendered into a cluster, only connected to."""
    if fleet.door_member is not None:
        return fleet.door_member.inventory, fleet.door_member.head
    from sparkctl.inventory.models import Cluster, Host, SSHDefaults

    inv = fleet.members[0].inventory.model_copy(
        update={
            "cluster": Cluster(name=fleet.name),  # never a member's name: nothing there is the member's
            "ssh_defaults": SSHDefaults(),
            "hosts": {DOOR_HOST: Host(role="head", ssh=fleet.front_door.host)},
            "engram": None,
        }
    )
    inv._source = fleet.path
    return inv, DOOR_HOST


@contextmanager
def door_session(fleet: "Fleet", early: bool = False) -> Iterator[tuple["Sessions", str]]:
    """SSH sessions holding only the door's host, and its name; closed afterwards. `early` starts
    the connection at once (a step that gathers facts first)."""
    from sparkctl.transport.ssh import Fleet as Sessions

    inv, host = door_inventory(fleet)
    with Sessions(inv, [host]) as sessions:
        if early:
            sessions.connect_early()
        yield sessions, host
