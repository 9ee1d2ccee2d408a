"""Network facts: interfaces and addresses (`ip -j addr`), routes (`ip -j route get`), link speed, pings,
and the netplan files that configure the rails (ours and any other, e.g. NVIDIA's playbook `40-cx7.yaml`)."""

from __future__ import annotations

import base64
import json
import re
import shlex
from dataclasses import dataclass, field
from ipaddress import IPv4Interface, IPv4Network
from typing import TYPE_CHECKING, Optional

from sparkctl.facts.base import Reading, Target, fact, host_fields

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts
    from sparkctl.inventory.models import FabricLink, Inventory

NETPLAN_PATH = "/etc/netplan/40-sparkctl-fabric.yaml"  # written by steps/fabric.py


@dataclass(frozen=True)
class Interface:
    name: str
    operstate: str  # UP, DOWN, UNKNOWN, LOWERLAYERDOWN ...
    flags: tuple[str, ...]
    mtu: int
    addresses: tuple[IPv4Interface, ...] = field(default_factory=tuple)

    @property
    def up(self) -> bool:
        # admin UP and carrier (LOWER_UP); veths and real NICs alike
        return "UP" in self.flags and "LOWER_UP" in self.flags


def parse_ip_addr(text: str) -> dict[str, Interface]:
    """Parse `ip -j addr` into interfaces by name (IPv4 addresses only: the fabric is IPv4)."""
    out: dict[str, Interface] = {}
    for item in json.loads(text or "[]"):
        addrs = tuple(
            IPv4Interface(f"{a['local']}/{a['prefixlen']}") for a in item.get("addr_info", []) if a.get("family") == "inet"
        )
        name = item["ifname"]
        out[name] = Interface(
            name=name,
            operstate=item.get("operstate", "UNKNOWN"),
            flags=tuple(item.get("flags", [])),
            mtu=int(item.get("mtu", 0)),
            addresses=addrs,
        )
    return out


def parse_route_get(text: str) -> Optional[str]:
    """The device `ip -j route get ADDR` would send through, or None (unreachable / error)."""
    try:
        routes = json.loads(text)
    except json.JSONDecodeError:
        return None
    if not routes or routes[0].get("type", "unicast") not in ("unicast", "local"):
        return None
    return routes[0].get("dev")


def parse_speeds(text: str) -> dict[str, Optional[int]]:
    """Lines `DEV SPEED` (from /sys/class/net/DEV/speed) -> Mb/s, None when unreadable or -1."""
    speeds: dict[str, Optional[int]] = {}
    for dev, value, *_ in (line.split() + [""] for line in text.splitlines() if line.strip()):
        speeds[dev] = int(value) if value.isdigit() and int(value) > 0 else None
    return speeds


_PING_TX = re.compile(r"(\d+) packets transmitted, (\d+) (?:packets )?received")


@dataclass(frozen=True)
class PingResult:
    ok: bool
    sent: int
    received: int
    detail: str


def parse_ping(rc: int, text: str) -> PingResult:
    """`ping -M do -s SIZE -c N -I DEV PEER` output: ok only when every packet came back.

    When the output holds several runs (a retry after a lost packet), the last one counts."""
    matches = list(_PING_TX.finditer(text))
    m = matches[-1] if matches else None
    sent, received = (int(m.group(1)), int(m.group(2))) if m else (0, 0)
    lines = [ln for ln in text.strip().splitlines() if ln.strip()]
    detail = next((ln for ln in lines if "too long" in ln or "mtu" in ln.lower() or "unreachable" in ln.lower()), "")
    if not detail and lines:
        detail = lines[-1]
    return PingResult(ok=(rc == 0 and sent > 0 and received == sent), sent=sent, received=received, detail=detail)


# IPv4 link-local (RFC 3927): what netplan's `link-local: [ ipv4 ]` puts on a device at every boot
LINK_LOCAL = IPv4Network("169.254.0.0/16")


def is_link_local(address: IPv4Interface) -> bool:
    return address.ip in LINK_LOCAL


NETPLAN_FILE_MARK = "@@netplan "


def netplan_probe(ours: str, devices: list[str], directory: str = "/etc/netplan") -> str:
    """Shell: every DIRECTORY/*.yaml that is ours or names a rail device, as `@@netplan PATH`
    and the file in base64 (exact bytes: ours is compared with what we would write)."""
    words = " ".join(f"-e {shlex.quote(d)}" for d in devices)
    return (
        f'for f in {shlex.quote(directory)}/*.yaml; do [ -f "$f" ] || continue; '
        f'[ "$f" = {shlex.quote(ours)} ] || grep -qwF {words} "$f" || continue; '
        f'printf \'{NETPLAN_FILE_MARK}%s\\n\' "$f"; base64 -w0 "$f" && echo; done; true'
    )


def parse_netplan_files(text: str) -> dict[str, str]:
    """`netplan_probe` output -> {path: file text}."""
    files: dict[str, str] = {}
    lines = text.splitlines()
    for i, line in enumerate(lines):
        if line.startswith(NETPLAN_FILE_MARK):
            try:  # a file we may not read leaves base64's error line instead: treated as absent
                data = base64.b64decode(lines[i + 1] if i + 1 < len(lines) else "", validate=True)
            except ValueError:
                continue
            files[line[len(NETPLAN_FILE_MARK) :].strip()] = data.decode("utf-8", "replace")
    return files


def netplan_stanzas(text: str, devices: list[str]) -> dict[str, dict]:
    """The `network.ethernets` entries of a netplan file that configure these devices (a rail a
    file configures is merged by netplan with every other file's: lexically later files win
    scalars, sequences such as addresses are concatenated). Raises ValueError on YAML it cannot read."""
    import yaml

    try:
        doc = yaml.safe_load(text) or {}
    except yaml.YAMLError as exc:
        raise ValueError(f"not valid YAML: {str(exc).splitlines()[0]}") from exc
    eth = ((doc.get("network") or {}) if isinstance(doc, dict) else {}).get("ethernets") or {}
    return {d: (eth[d] or {}) for d in devices if isinstance(eth, dict) and d in eth}


def describe_stanza(stanza: dict) -> str:
    """A rail's settings in another netplan file, as an operator would summarise them."""
    parts = []
    if "link-local" in stanza:
        parts.append(f"link-local: [ {', '.join(map(str, stanza['link-local'] or []))} ]")
    if stanza.get("addresses"):
        parts.append("addresses " + ", ".join(map(str, stanza["addresses"])))
    if stanza.get("dhcp4") in (True, "yes", "true"):
        parts.append("dhcp4")
    if "mtu" in stanza:
        parts.append(f"mtu {stanza['mtu']}")
    return ", ".join(parts) or "settings"


@host_fields
class NetworkFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    interfaces: Optional[dict[str, Interface]] = None  # `ip -j addr`, None: not read
    speeds: dict[str, Optional[int]] = field(default_factory=dict)  # device -> Mb/s (None when unreadable)
    virtual: set[str] = field(default_factory=set)  # net devices with no bus device (veth): no line rate
    routes: dict[int, Optional[str]] = field(default_factory=dict)  # rail index -> device the route uses
    route_text: dict[int, str] = field(default_factory=dict)  # rail index -> `ip route get`'s answer
    pings: dict[int, PingResult] = field(default_factory=dict)  # rail index -> PingResult
    netplan: Optional[str] = None  # the fabric netplan file sparkctl writes, None when absent
    netplan_others: dict[str, str] = field(default_factory=dict)  # other /etc/netplan files naming a rail: path -> text


# --- the facts (facts/base.py) ---------------------------------------------------------------


def peer_ip(inv: Inventory, host: str, link: FabricLink) -> Optional[str]:
    """The peer's address on the same rail (the rail on the peer pointing back, same subnet)."""
    peer = inv.hosts.get(link.peer)
    if peer is None:
        return None
    for other in peer.fabric:
        if other.peer == host and other.address.network == link.address.network:
            return str(other.address.ip)
    return None


def ping_command(link: FabricLink, ip: str) -> str:
    # MTU-28 bytes (IP + ICMP headers), fragmentation forbidden: proves jumbo frames end to end.
    # One packet answers in microseconds on a good rail; one retry keeps a single lost packet
    # from failing a healthy rail.
    one = f"ping -M do -s {link.mtu - 28} -c 1 -W 1 -I {shlex.quote(link.device)} {shlex.quote(ip)}"
    return f"{one} || {{ sleep 0.2; {one}; }}"


def per_device(devices: list[str], value: str) -> str:
    """Shell: a `DEVICE VALUE` line per device, VALUE a shell word over $d."""
    return "for d in " + " ".join(shlex.quote(d) for d in devices) + f'; do printf "%s %s\\n" "$d" "{value}"; done'


def _rails(t: Target) -> list[str]:
    return [link.device for link in t.host.fabric]


def _peers(t: Target) -> dict[int, tuple[FabricLink, str]]:
    """Rail index -> (rail, the peer's address on it), for rails whose peer is in the inventory."""
    pairs = ((i, link, peer_ip(t.inventory, t.name, link)) for i, link in enumerate(t.host.fabric))
    return {i: (link, ip) for i, link, ip in pairs if ip}


@fact("ip_addr", lambda t: "ip -j addr" if t.host.fabric else None)
def _ip_addr(f: HostFacts, r: Reading) -> None:
    if not r.ok:
        f.errors[r.key] = r.last_line()
    else:
        f.interfaces = parse_ip_addr(r.out)


# third column: a device without a bus device behind it is virtual (veth, lab)
SPEED = (
    "$(cat /sys/class/net/$d/speed 2>/dev/null || echo -1) $([ -e /sys/class/net/$d/device ] && echo physical || echo virtual)"
)


@fact(
    "speeds",
    lambda t: per_device(_rails(t), SPEED) if t.host.fabric else None,
)
def _speeds(f: HostFacts, r: Reading) -> None:
    f.speeds.update(parse_speeds(r.out))
    f.virtual.update(ln.split()[0] for ln in r.out.splitlines() if ln.split()[2:3] == ["virtual"])


@fact(
    "route",
    lambda t: {i: f"ip -j route get {shlex.quote(ip)}" for i, (_, ip) in _peers(t).items()},
    background=True,
)  # rail index -> device the route uses / the answer
def _route(f: HostFacts, r: Reading) -> None:
    f.routes[r.index], f.route_text[r.index] = parse_route_get(r.out), r.out.strip()


@fact(
    "ping", lambda t: {i: ping_command(link, ip) for i, (link, ip) in _peers(t).items()}, background=True
)  # rail index -> PingResult
def _ping(f: HostFacts, r: Reading) -> None:
    f.pings[r.index] = parse_ping(r.rc, r.out)


@fact(
    "netplan",
    lambda t: netplan_probe(NETPLAN_PATH, _rails(t)) if t.host.fabric else None,
)
def _netplan(f: HostFacts, r: Reading) -> None:
    if not r.ok:
        f.errors[r.key] = r.last_line()
        return
    files = parse_netplan_files(r.out)
    f.netplan = files.pop(NETPLAN_PATH, None)
    f.netplan_others = files
