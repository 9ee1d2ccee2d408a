"""RDMA facts: `ibdev2netdev` mapping and `/sys/class/infiniband/<dev>/ports/1/state`."""

from __future__ import annotations

import re
from dataclasses import dataclass

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
