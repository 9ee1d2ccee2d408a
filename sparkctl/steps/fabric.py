"""Fabric step: each rail's address and MTU set now and persisted (netplan), then proven by jumbo ping.

Facts: `ip -j addr`, the current netplan file, and one jumbo ping per rail (MTU-28 bytes, don't
fragment, out of the rail's device to the peer's address). Every host pings its peers, so each
rail is proven in both directions. A rail that cannot be proven stops `up` with the reason.
"""

from __future__ import annotations

import shlex

from sparkctl.errors import HostError
from sparkctl.facts import network
from sparkctl.facts.host import peer_ip, ping_command  # the same proof doctor's fabric.ping uses
from sparkctl.inventory.models import FabricLink, Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.templates import render_template

NETPLAN_PATH = "/etc/netplan/40-sparkctl-fabric.yaml"


def peer_address(inv: Inventory, host: str, link: FabricLink) -> str:
    """The peer's address on the same rail (same subnet), as the inventory validator guarantees."""
    ip = peer_ip(inv, host, link)
    if ip is None:
        raise HostError(f"{host}: no rail on {link.peer} in {link.address.network} points back here")
    return ip


def netplan_text(inv: Inventory, host: str) -> str:
    return render_template("netplan-fabric.yaml.j2", cluster=inv.cluster.name, host=host, links=inv.hosts[host].fabric)


class FabricStep(Step):
    name = "fabric"
    description = "fabric addresses and MTU on every rail, persisted in netplan, proven by jumbo ping"

    def hosts(self, inv: Inventory) -> list[str]:
        return [h for h, spec in inv.hosts.items() if spec.fabric]

    def probes(self, inv: Inventory, host: str) -> dict[str, str]:
        probes = {"ip_addr": "ip -j addr", "netplan": f"cat {NETPLAN_PATH}"}
        for i, link in enumerate(inv.hosts[host].fabric):
            probes[f"ping{i}"] = ping_command(link, peer_address(inv, host, link))
        return probes

    def background(self, inv: Inventory, host: str) -> set[str]:
        return {f"ping{i}" for i in range(len(inv.hosts[host].fabric))}

    def plan(self, ctx: RunContext, host: str) -> Plan:
        inv = ctx.inventory
        sec = ctx.section(host, "ip_addr")
        if not sec.ok:
            return Plan(self.name, host, blocked=f"cannot read interfaces (ip -j addr): {sec.out.strip()[:200]}")
        ifaces = network.parse_ip_addr(sec.out)
        changes: list[Change] = []
        fine: list[str] = []
        for link in inv.hosts[host].fabric:
            iface = ifaces.get(link.device)
            if iface is None:
                return Plan(
                    self.name,
                    host,
                    blocked=f"net device {link.device} does not exist (have: {', '.join(sorted(ifaces))})",
                )
            holder = next((i.name for i in ifaces.values() if link.address.ip in [a.ip for a in i.addresses]), None)
            if holder and holder != link.device:
                return Plan(self.name, host, blocked=f"{link.address.ip} is already on {holder}, not {link.device}")
            dev_changes = []
            if iface.mtu != link.mtu:
                dev_changes.append(
                    Change("set-mtu", f"set MTU {link.mtu} on {link.device} (now {iface.mtu})",
                           {"device": link.device, "mtu": link.mtu})
                )  # fmt: skip
            if "UP" not in iface.flags:
                dev_changes.append(Change("link-up", f"bring {link.device} up", {"device": link.device}))
            if link.address not in iface.addresses:
                dev_changes.append(
                    Change("add-address", f"add {link.address} to {link.device}",
                           {"device": link.device, "address": str(link.address)})
                )  # fmt: skip
            if dev_changes:
                changes += dev_changes
            else:
                fine.append(f"{link.address} MTU {link.mtu} already on {link.device}")
        wanted = netplan_text(inv, host)
        current = ctx.section(host, "netplan")
        if not current.ok or current.out != wanted:
            what = "write" if not current.ok else "update"
            changes.append(
                Change("persist", f"{what} {NETPLAN_PATH} (previous kept as .bak)", {"path": NETPLAN_PATH, "text": wanted})
            )
        if not changes:
            return self.noop(host, "; ".join(fine) + f"; {NETPLAN_PATH} up to date")
        return self.changes(host, changes)

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        session = ctx.fleet[plan.host]
        cmds = []
        for c in plan.changes:
            dev = shlex.quote(c.data.get("device", ""))
            if c.action == "set-mtu":
                cmds.append(f"ip link set dev {dev} mtu {int(c.data['mtu'])}")
            elif c.action == "link-up":
                cmds.append(f"ip link set dev {dev} up")
            elif c.action == "add-address":
                cmds.append(f"ip addr add {shlex.quote(c.data['address'])} dev {dev}")
        persist = next((c for c in plan.changes if c.action == "persist"), None)
        if cmds:
            session.run(" && ".join(cmds)).check("fabric configuration")
        if persist:
            path = persist.data["path"]
            q = shlex.quote(path)
            session.run(f"mkdir -p $(dirname {q}) && if [ -f {q} ]; then cp -p {q} {q}.bak; fi").check("netplan backup")
            session.put_bytes(persist.data["text"].encode(), path, mode=0o600)
            # validate the file where netplan exists; never `netplan apply` (it can bounce the management link)
            r = session.run("if command -v netplan >/dev/null; then netplan generate; fi")
            if not r.ok:
                session.run(f"cp -p {q}.bak {q} 2>/dev/null || rm -f {q}")
                raise HostError(f"{plan.host}: netplan rejected {path}: {r.stdout.strip()} {r.stderr.strip()}"[:500])
        return "; ".join(c.summary for c in plan.changes)

    def verify(self, ctx: RunContext, host: str, changed: bool) -> str:
        """Prove every rail with a jumbo ping (pinged again when anything changed on this run)."""
        inv = ctx.inventory
        failures, proven = [], []
        for i, link in enumerate(inv.hosts[host].fabric):
            peer_ip = peer_address(inv, host, link)
            sec = ctx.section(host, f"ping{i}")
            result = network.parse_ping(sec.rc, sec.out)
            if changed or not result.ok:  # the gathered ping predates this run's changes: ask again
                r = ctx.fleet[host].run(ping_command(link, peer_ip))
                result = network.parse_ping(r.exit_code, r.stdout + r.stderr)
            if result.ok:
                proven.append(f"{link.device}->{link.peer}")
            else:
                failures.append(
                    f"{link.device} -> {link.peer} {peer_ip}: {link.mtu - 28}-byte ping failed ({result.detail or 'no reply'})"
                )
        if failures:
            raise HostError(
                f"{host}: rail not proven: " + "; ".join(failures),
                fix="check cable/port and that both ends have the same MTU: `sparkctl doctor --only fabric`",
            )
        return f"jumbo ping ok on {len(proven)} rail(s): {', '.join(proven)}"
