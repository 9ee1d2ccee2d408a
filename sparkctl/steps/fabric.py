"""Fabric step: each rail's address and MTU set now and persisted (netplan), then proven by jumbo ping.

Facts: `ip -j addr`, the netplan files that configure the rails, and one jumbo ping per rail
(MTU-28 bytes, don't fragment, out of the rail's device to the peer's address). Every host pings
its peers, so each rail is proven in both directions. After a change, each rail also carries
doctor's short bandwidth probe (fabric.bandwidth, measured once for the run): a degraded
ConnectX-7 pings fine and reports its nominal speed. A rail that cannot be proven stops `up` with
the reason.

sparkctl owns its rails: another /etc/netplan file that configures one (NVIDIA's connect-two-sparks
playbook writes `40-cx7.yaml` with `link-local: [ ipv4 ]`, which puts a 169.254.x/16 address beside
ours at every boot) is taken over: a copy is kept as `<file>.bak` and the rails' entries leave it,
its other devices stay. Deleting the address alone would not last past the next boot.
"""

from __future__ import annotations

import shlex
import threading
from typing import TYPE_CHECKING, Optional

from sparkctl.errors import HostError
from sparkctl.facts import network
from sparkctl.facts.network import NETPLAN_PATH, peer_ip  # the same jumbo-ping proof doctor's fabric.ping reads
from sparkctl.inventory.models import FabricLink, Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.templates import render_template

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

# the plan's operations on a rail, as `ip` commands (data values are shell-quoted)
IP_COMMANDS = {
    "del-address": "ip addr del {address} dev {device}",
    "set-mtu": "ip link set dev {device} mtu {mtu}",
    "link-up": "ip link set dev {device} up",
    "add-address": "ip addr add {address} dev {device}",
}


def peer_address(inv: Inventory, host: str, link: FabricLink) -> str:
    """The peer's address on the same rail (same subnet), as the inventory validator guarantees."""
    ip = peer_ip(inv, host, link)
    if ip is None:
        raise HostError(f"{host}: no rail on {link.peer} in {link.address.network} points back here")
    return ip


def netplan_text(inv: Inventory, host: str) -> str:
    return render_template("netplan-fabric.yaml.j2", cluster=inv.cluster.name, host=host, links=inv.hosts[host].fabric)


def takeovers(f: HostFacts, devices: list[str]) -> list[tuple[str, dict[str, dict], Optional[str]]]:
    """Other netplan files that configure these rails: (path, the rails' entries, the file's text
    without them, None when nothing else is left in it). A file we cannot read as YAML is left
    alone and reported by the caller."""
    import yaml

    out = []
    for path, text in sorted(f.netplan_others.items()):
        stanzas = network.netplan_stanzas(text, devices)
        if not stanzas:
            continue
        doc = yaml.safe_load(text)
        eth = doc["network"]["ethernets"]
        for dev in stanzas:
            del eth[dev]
        if not eth:
            del doc["network"]["ethernets"]
        left = {k: v for k, v in doc["network"].items() if k not in ("version", "renderer")}
        rest = None
        if left:
            rest = f"# sparkctl took {', '.join(stanzas)} over ({NETPLAN_PATH}); the original is {path}.bak\n" + yaml.safe_dump(
                doc, sort_keys=False, default_flow_style=False
            )
        out.append((path, stanzas, rest))
    return out


def link_local_source(f: HostFacts, device: str) -> Optional[str]:
    """The other netplan file that asks for IPv4 link-local on this device, if any."""
    for path, text in sorted(f.netplan_others.items()):
        try:
            stanza = network.netplan_stanzas(text, [device]).get(device, {})
        except ValueError:
            continue
        if "ipv4" in [str(x).lower() for x in (stanza.get("link-local") or [])]:
            return path
    return None


def owner_of(inv: Inventory, ip) -> Optional[str]:
    """Which inventory host a fabric address belongs to (None: no host's)."""
    for name, spec in inv.hosts.items():
        if any(link.address.ip == ip for link in spec.fabric):
            return name
    return None


class FabricStep(Step):
    name = "fabric"
    facts = frozenset({"ip_addr", "netplan", "ping", "speeds"})  # speeds: which rails are virtual (veths)

    def __init__(self) -> None:
        self._probe_lock = threading.Lock()
        self._probed: Optional[tuple] = None  # (ctx id, rails, verdicts): measured once per run

    def hosts(self, inv: Inventory) -> list[str]:
        return [h for h, spec in inv.hosts.items() if spec.fabric]

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        """Each rail ends with exactly the inventory's address: stray addresses on a rail are removed
        (a wrong one left primary would be the source of the traffic), an address sitting on another
        rail of this host is moved; one held by a device that is not a rail is refused with the fix."""
        inv = ctx.inventory
        f = ctx.facts[host]
        if f.interfaces is None:
            return self.blocked(host, f"cannot read interfaces (ip -j addr): {f.errors.get('ip_addr', 'no answer')[:200]}")
        ifaces = f.interfaces
        rails = {link.device for link in inv.hosts[host].fabric}
        changes: list[Change] = []
        fine: list[str] = []
        for link in inv.hosts[host].fabric:
            iface = ifaces.get(link.device)
            if iface is None:
                return self.blocked(host, f"net device {link.device} does not exist (have: {', '.join(sorted(ifaces))})")
            dev_changes = []
            for other in ifaces.values():
                held = [a for a in other.addresses if a.ip == link.address.ip]
                if other.name == link.device or not held:
                    continue
                if other.name not in rails:
                    return self.blocked(
                        host,
                        f"{link.address.ip} is on {other.name}, which is not a fabric rail: move it by hand "
                        f"(`ip addr del {held[0]} dev {other.name}` on {host}), then rerun `sparkctl up`",
                    )
                dev_changes.append(
                    Change(
                        "del-address",
                        f"remove {held[0]} from {other.name} (it belongs on {link.device})",
                        {"device": other.name, "address": str(held[0])},
                    )
                )
            for stray in iface.addresses:
                if stray != link.address:
                    whose = owner_of(inv, stray.ip)
                    why = f"{whose}'s address" if whose and whose != host else "not in the inventory"
                    if network.is_link_local(stray):
                        source = link_local_source(f, link.device)
                        why = (
                            f"IPv4 link-local from {source}, taken over below"
                            if source
                            else "IPv4 link-local from outside /etc/netplan: NetworkManager or avahi-autoipd may add it again"
                        )
                    dev_changes.append(
                        Change(
                            "del-address",
                            f"remove stray {stray} from {link.device} ({why})",
                            {"device": link.device, "address": str(stray)},
                        )
                    )
            if iface.mtu != link.mtu:
                dev_changes.append(
                    Change(
                        "set-mtu",
                        f"set MTU {link.mtu} on {link.device} (now {iface.mtu})",
                        {"device": link.device, "mtu": link.mtu},
                    )
                )
            if "UP" not in iface.flags:
                dev_changes.append(Change("link-up", f"bring {link.device} up", {"device": link.device}))
            if link.address not in iface.addresses:
                dev_changes.append(
                    Change(
                        "add-address",
                        f"add {link.address} to {link.device}",
                        {"device": link.device, "address": str(link.address)},
                    )
                )
            if dev_changes:
                changes += dev_changes
            else:
                fine.append(f"{link.address} MTU {link.mtu} already on {link.device}")
        devices = [link.device for link in inv.hosts[host].fabric]
        for path in sorted(f.netplan_others):
            try:
                network.netplan_stanzas(f.netplan_others[path], devices)
            except ValueError as exc:
                return self.blocked(
                    host,
                    f"{path} names a rail but is {exc}: fix or remove it (`netplan generate` on {host}), then rerun `sparkctl up`",
                )
        for path, stanzas, rest in takeovers(f, devices):
            what = "; ".join(f"{d}: {network.describe_stanza(st)}" for d, st in stanzas.items())
            then = "its other devices stay" if rest else "nothing else is left in it, so it is removed"
            changes.append(
                Change(
                    "take-over",
                    f"take {', '.join(stanzas)} over from {path} ({what}): the original is kept as {path}.bak, {then}",
                    {"path": path, "text": rest, "devices": list(stanzas)},
                )
            )
        wanted = netplan_text(inv, host)
        if f.netplan != wanted:
            what = "write" if f.netplan is None else "update"
            changes.append(
                Change("persist", f"{what} {NETPLAN_PATH} (previous kept as .bak)", {"path": NETPLAN_PATH, "text": wanted})
            )
        if not changes:
            return self.noop(host, "; ".join(fine) + f"; {NETPLAN_PATH} up to date")
        # an address moved from another rail is also a stray there: remove it once
        unique: dict[tuple, Change] = {}
        for c in changes:
            unique.setdefault((c.action, c.data.get("device"), c.data.get("address"), c.data.get("path")), c)
        # removals first: the right address, added after, becomes the rail's primary (source) address
        return self.changes(host, sorted(unique.values(), key=lambda c: c.action != "del-address"))

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        session = ctx.session(plan.host)
        cmds = [
            IP_COMMANDS[c.action].format(**{k: shlex.quote(str(v)) for k, v in c.data.items()})
            for c in plan.changes
            if c.action in IP_COMMANDS
        ]
        files = [c for c in plan.changes if c.action in ("take-over", "persist")]
        if cmds:
            session.run(" && ".join(cmds)).check("fabric configuration")
        if files:
            # every file we touch is backed up first (a file that did not exist is marked so the undo removes it)
            undo = []
            for c in files:
                q = shlex.quote(c.data["path"])
                session.run(f"mkdir -p $(dirname {q}) && if [ -f {q} ]; then cp -p {q} {q}.bak; fi").check("netplan backup")
                undo.append(f"if [ -f {q}.bak ]; then cp -p {q}.bak {q}; else rm -f {q}; fi")
            for c in files:
                if c.data["text"] is None:
                    session.run(f"rm -f {shlex.quote(c.data['path'])}").check("netplan take-over")
                else:
                    session.put_bytes(c.data["text"].encode(), c.data["path"], mode=0o600)
            # validate the files where netplan exists; never `netplan apply` (it can bounce the management link)
            r = session.run("if command -v netplan >/dev/null; then netplan generate; fi")
            if not r.ok:
                session.run("; ".join(undo))
                raise HostError(
                    f"{plan.host}: netplan rejected the fabric files ({', '.join(c.data['path'] for c in files)}), "
                    f"restored them: {r.stdout.strip()} {r.stderr.strip()}"[:500]
                )
        return "; ".join(c.summary for c in plan.changes)

    def verify(self, ctx: RunContext, host: str, changed: bool) -> str:
        """Prove every rail with a jumbo ping (pinged again when anything changed on this run)."""
        inv = ctx.inventory
        pings = ctx.facts[host].pings
        if changed or not all(p.ok for p in pings.values()):  # the gathered pings predate this run's changes
            pings = ctx.refresh(host, {"ping"}).pings
        failures, proven = [], []
        for i, link in enumerate(inv.hosts[host].fabric):
            result = pings.get(i) or network.PingResult(False, 0, 0, "not pinged")
            if result.ok:
                proven.append(f"{link.device}->{link.peer}")
            else:
                failures.append(
                    f"{link.device} -> {link.peer} {peer_address(inv, host, link)}: "
                    f"{link.mtu - 28}-byte ping failed ({result.detail or 'no reply'})"
                )
        if failures:
            raise HostError(
                f"{host}: rail not proven: " + "; ".join(failures),
                fix="check cable/port and that both ends have the same MTU: `sparkctl doctor --only fabric`",
            )
        proof = f"jumbo ping ok on {len(proven)} rail(s): {', '.join(proven)}"
        if not changed:
            return proof
        mine = [(rail, v) for rail, v in self._probe(ctx) if rail.end(host)]
        bad = [v for _, v in mine if v.status == "failed"]
        if bad:
            raise HostError(f"{host}: rail degraded: " + "; ".join(v.message for v in bad), fix=bad[0].fix)
        warned = [v.message for _, v in mine if v.status == "warn"]
        return proof + f"; bandwidth probe ok on {len(mine) - len(warned)} rail(s)" + "".join(f"; warning: {w}" for w in warned)

    def _probe(self, ctx: RunContext) -> list:
        """doctor's fabric.bandwidth probe over every rail between this step's hosts, once per run
        (whichever host's verify comes first measures; the others wait and judge their ends)."""
        from sparkctl.checks.fabric import judge_rails
        from sparkctl.facts import bandwidth

        with self._probe_lock:
            if self._probed is None or self._probed[0] != id(ctx):
                hosts = [h for h in self.hosts(ctx.inventory) if h in ctx.facts]
                every = bandwidth.rails(ctx.inventory, hosts)
                for h in hosts:
                    ctx.progress(h, self.name, f"probing the bandwidth of {len(every)} rail(s)")
                results = bandwidth.measure(ctx.sessions, every)
                ctx.outputs.rail_gbps.update(bandwidth.measured_ends(every, results))
                virtual = {(h, d) for h in hosts for d in ctx.facts[h].virtual}
                verdicts = judge_rails(every, results, virtual)
                self._probed = (id(ctx), [(r, verdicts[r.key]) for r in every if r.key in verdicts])
            return self._probed[1]
