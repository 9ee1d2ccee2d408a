"""The keeper as facts: its unit and files on the head (what `up` installs), the head's key in each
host's authorized_keys, and the keeper's own state file (watching, recovering, gave up)."""

from __future__ import annotations

import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Optional

from sparkctl import state
from sparkctl.facts.base import Reading, Target, fact, host_fields
from sparkctl.facts.state import read_state_file
from sparkctl.records import KeeperRecord

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts


@dataclass(frozen=True)
class KeeperUnit:
    """What the head holds of the keeper's install."""

    command: Optional[str]  # the keeper.sparkctl command resolved on the head's PATH, None: not found
    systemctl: bool  # a systemctl is on the head's PATH (systemd, or the lab's stand-in)
    enabled: str  # systemctl is-enabled: enabled, disabled, not-found ...
    active: str  # systemctl is-active: active, inactive, activating, failed ...
    sums: dict[str, str]  # path -> sha256 of the file ("" when absent)
    public_key: Optional[str]  # the head's keeper key, "type base64 comment"

    @property
    def installed(self) -> bool:
        return any(self.sums.values()) or self.enabled == "enabled"


def _unit_probe(t: Target) -> Optional[str]:
    if t.host.role != "head":
        return None
    from sparkctl.launch import keeper as unit

    q = shlex.quote
    files = " ".join(q(p) for p in (unit.UNIT_PATH, unit.INVENTORY, unit.KNOWN_HOSTS))
    return (
        f'echo "command $(command -v {q(t.inventory.keeper.sparkctl)} || true)"; '
        'echo "systemctl $(command -v systemctl || true)"; '
        f'echo "enabled $(systemctl is-enabled {unit.UNIT} 2>/dev/null || true)"; '
        f'echo "active $(systemctl is-active {unit.UNIT} 2>/dev/null || true)"; '
        # one sha256sum for the three (a file absent: "sum PATH" with no hash, from the shell alone)
        f'sha256sum -- {files} 2>/dev/null | while read -r h p; do echo "sum $p $h"; done; '
        f'for f in {files}; do [ -e "$f" ] || echo "sum $f "; done; '
        f'echo "pub $(cat {q(unit.KEY)}.pub 2>/dev/null)"'
    )


def parse_unit(text: str) -> KeeperUnit:
    got: dict[str, str] = {}
    sums: dict[str, str] = {}
    for line in text.splitlines():
        key, _, rest = line.partition(" ")
        if key == "sum":
            path, _, value = rest.partition(" ")
            sums[path] = value.strip()
        elif key:
            got[key] = rest.strip()
    return KeeperUnit(
        command=got.get("command") or None,
        systemctl=bool(got.get("systemctl")),
        enabled=got.get("enabled") or "not-found",
        active=got.get("active") or "inactive",
        sums=sums,
        public_key=got.get("pub") or None,
    )


@host_fields
class KeeperFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    keeper_unit: Optional[KeeperUnit] = None  # KeeperUnit on the head
    keeper_auth: list[str] = field(default_factory=list)  # the keeper key's lines in authorized_keys
    keeper: Optional[KeeperRecord] = None  # the keeper's state file, None: none written


@fact("keeper_unit", _unit_probe)  # KeeperUnit on the head
def _keeper_unit(f: HostFacts, r: Reading) -> None:
    f.keeper_unit = parse_unit(r.out)


def _auth_probe(t: Target) -> str:
    from sparkctl.launch.keeper import key_comment

    return f"grep -F {shlex.quote(key_comment(t.inventory.cluster.name))} ~/.ssh/authorized_keys 2>/dev/null || true"


@fact("keeper_auth", _auth_probe)  # the keeper key's lines in authorized_keys
def _keeper_auth(f: HostFacts, r: Reading) -> None:
    f.keeper_auth = [ln.strip() for ln in r.out.splitlines() if ln.strip()]


def _state_probe(t: Target) -> Optional[str]:
    return f"cat {state.KEEPER} 2>/dev/null || true" if t.host.role == "head" else None


@fact("keeper", _state_probe)  # the keeper's state file (records.KeeperRecord), None: none written
def _keeper(f: HostFacts, r: Reading) -> None:
    f.keeper = read_state_file(f, r, KeeperRecord, state.KEEPER)
