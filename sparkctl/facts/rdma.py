"""RDMA facts: `ibdev2netdev` mapping, `/sys/class/infiniband/<dev>/ports/1/state` and one GID table entry."""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from ipaddress import IPv4Address, IPv6Address
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, Target, fact, host_fields
from sparkctl.facts.network import per_device

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

_LINE = re.compile(r"^(?P<dev>\S+) port (?P<port>\d+) ==> (?P<netdev>\S+) \((?P<state>\w+)\)")


@dataclass(frozen=True)
class RdmaPort:
    device: str
    port: int
    netdev: str
    link: str  # Up / Down, as ibdev2netdev prints


def parse_ibdev2netdev(text: str) -> dict[str, RdmaPort]:
    """`rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)` -> {'rocep1s0f1': RdmaPort(...)}."""
    found = (_LINE.match(line.strip()) for line in text.splitlines())
    return {m["dev"]: RdmaPort(m["dev"], int(m["port"]), m["netdev"], m["state"]) for m in found if m}


def parse_port_states(text: str) -> dict[str, str]:
    """Lines `DEV STATE...` (e.g. `rocep1s0f0 4: ACTIVE`) -> {'rocep1s0f0': 'ACTIVE'}."""
    rows = (line.split(None, 1) for line in text.splitlines())
    return {row[0]: row[1].split(":")[-1].strip() for row in rows if len(row) == 2}


@dataclass(frozen=True)
class GidEntry:
    """One row of a port's GID table, as sysfs (and `show_gids`) gives it."""

    type: str  # "RoCE v2", "IB/RoCE v1", or "missing": an empty slot or past the end of the table
    gid: Optional[IPv6Address]
    netdev: str

    @property
    def ipv4(self) -> Optional[IPv4Address]:
        """The IPv4 address of an IPv4-mapped GID (::ffff:a.b.c.d), else None."""
        return self.gid.ipv4_mapped if self.gid is not None else None

    @property
    def link_local(self) -> bool:
        """fe80::/10: the GID the port has from its MAC, whatever addresses the netdev holds."""
        return self.gid is not None and self.gid.is_link_local


def gid_probe_value(index: str) -> str:
    """Shell word over $d: `TYPE|GID|NETDEV` of GID `index` on port 1 (`missing` for an empty slot:
    sysfs refuses to read the type of one, EINVAL, and shows its GID as zeros)."""
    attrs = "/sys/class/infiniband/$d/ports/1"
    return (
        f"$(cat {attrs}/gid_attrs/types/{index} 2>/dev/null || echo missing)|"
        f"$(cat {attrs}/gids/{index} 2>/dev/null)|$(cat {attrs}/gid_attrs/ndevs/{index} 2>/dev/null)"
    )


def parse_gids(text: str) -> dict[str, GidEntry]:
    """Lines `DEV TYPE|GID|NETDEV` (gid_probe_value) -> {dev: GidEntry}. An old probe's `DEV TYPE` reads too."""
    out: dict[str, GidEntry] = {}
    for line in text.splitlines():
        dev, _, rest = line.strip().partition(" ")
        if not dev or not rest:
            continue
        kind, _, tail = rest.partition("|")
        gid_text, _, netdev = tail.partition("|")
        try:
            gid = IPv6Address(gid_text.strip()) if gid_text.strip() else None
        except ValueError:
            gid = None
        if gid is not None and int(gid) == 0:
            gid = None
        out[dev] = GidEntry(kind.strip() or "missing", gid, netdev.strip())
    return out


@host_fields
class RdmaFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    rdma_states: dict[str, str] = field(default_factory=dict)  # RDMA device -> port state ("ACTIVE", "missing")
    ibdev: dict[str, RdmaPort] = field(default_factory=dict)  # RDMA device -> RdmaPort
    gids: dict[str, GidEntry] = field(default_factory=dict)  # RDMA device -> its entry at the pinned NCCL_IB_GID_INDEX


# --- the facts (facts/base.py) ---------------------------------------------------------------


def _devices(t: Target) -> list[str]:
    return [d for link in t.host.fabric for d in link.rdma]


@fact(
    "rdma_state",
    lambda t: (
        per_device(_devices(t), "$(cat /sys/class/infiniband/$d/ports/1/state 2>/dev/null || echo missing)")
        if _devices(t)
        else None
    ),
)
def _rdma_state(f: HostFacts, r: Reading) -> None:
    f.rdma_states.update(parse_port_states(r.out))


@fact("ibdev2netdev", lambda t: "ibdev2netdev" if _devices(t) else None)  # RDMA device -> RdmaPort
def _ibdev2netdev(f: HostFacts, r: Reading) -> None:
    f.ibdev.update(parse_ibdev2netdev(r.out))


def _gid_probe(t: Target) -> Optional[str]:
    index = t.inventory.runtime.env.get("NCCL_IB_GID_INDEX")
    if index is None or not _devices(t):
        return None
    import shlex

    return per_device(_devices(t), gid_probe_value(shlex.quote(index)))


@fact("gid", _gid_probe)  # RDMA device -> its entry at the pinned NCCL_IB_GID_INDEX
def _gid(f: HostFacts, r: Reading) -> None:
    f.gids.update(parse_gids(r.out))
