"""The keeper step: the supervisor that brings the cluster back by itself (docs/keeper.md).

In `up` (last, once the cluster serves) it installs on the head what `sparkctl keeper run` needs
and keeps it current: the head's own SSH key (authorised on every host of the cluster, the head
included, with a comment naming the cluster), the inventory the keeper runs with (every host
reached with that key), a known_hosts of the keys this run verified, and the systemd unit,
enabled and (re)started when any of them changed. In `down` (first, so nothing brings back what
`down` stops: option `remove`) and with `keeper.enabled: false` it removes all of it.
"""

from __future__ import annotations

import shlex
import time

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.launch import keeper as unit
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.steps.keeper_files import digest, keeper_inventory, known_hosts_lines, render_unit

ACTIVE_WAIT_S = 15.0  # the unit's process starts within a second or two; past this it is failing


class KeeperStep(Step):
    name = "keeper"
    facts = frozenset({"keeper_unit", "keeper_auth"})

    def hosts(self, inv: Inventory) -> list[str]:
        head = inv.hosts_with_role("head")[0]
        return [head] + [h for h in inv.hosts if h != head]  # the head first: its key is made there

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        inv = ctx.inventory
        head = inv.hosts_with_role("head")[0]
        if head not in ctx.facts:
            return {}
        keeper = ctx.facts[head].keeper_unit
        if keeper is None:
            return {
                head: self.blocked(
                    head, f"cannot read the keeper's unit: {ctx.facts[head].errors.get('keeper_unit', 'no answer')}"
                )
            }
        remove = self.options.remove or not inv.keeper.enabled
        plans = {head: self._remove_head(head, keeper) if remove else self._head(ctx, head, keeper)}
        pub = keeper.public_key
        for h in self.hosts(inv):
            if h not in ctx.facts:
                continue
            lines = ctx.facts[h].keeper_auth
            change = None
            if remove and lines:
                change = Change("deauthorize", f"remove the head's keeper key from {h}'s authorized_keys")
            elif not remove and (pub is None or pub not in lines or len(lines) > 1):
                change = Change("authorize", f"authorise the head's keeper key in {h}'s authorized_keys")
            if h == head:
                p = plans[head]
                if change and not p.blocked:  # after the key is made, before the keeper starts with it
                    at = 1 if p.changes and p.changes[0].action == "keygen" else 0
                    plans[head] = self.changes(head, [*p.changes[:at], change, *p.changes[at:]])
            elif change:
                plans[h] = self.changes(h, [change])
            else:
                plans[h] = self.noop(h, "no keeper key here" if remove else "the head's keeper key is authorised")
        return plans

    def _head(self, ctx: RunContext, head: str, keeper) -> Plan:
        inv = ctx.inventory
        if not keeper.systemctl:
            return self.blocked(
                head,
                f"no systemctl on {head}: the keeper runs as a systemd unit (DGX OS has systemd); "
                "set keeper.enabled: false to run without it",
            )
        if keeper.command is None:
            return self.blocked(
                head,
                f"`{inv.keeper.sparkctl}` is not on {head}'s PATH: install this sparkctl there "
                "(docs/keeper.md), set keeper.sparkctl to its path, or keeper.enabled: false",
            )
        ops = []
        if keeper.public_key is None:
            ops.append(Change("keygen", f"create the head's own SSH key {unit.KEY} (the keeper reaches the hosts with it)"))
        wanted = self.files(ctx, keeper.command)
        for path, text in wanted.items():
            if keeper.sums.get(path) != digest(text):
                ops.append(
                    Change("write", f"write {path}" + (" (now absent)" if not keeper.sums.get(path) else ""), {"path": path})
                )
        if ops or keeper.enabled != "enabled" or keeper.active != "active":
            why = f"{unit.UNIT} is {keeper.enabled}, {keeper.active}" if not ops else f"restart {unit.UNIT} on its new files"
            ops.append(Change("enable", f"enable and (re)start {unit.UNIT} ({why})"))
            return self.changes(head, ops)
        return self.noop(head, f"{unit.UNIT} enabled and active, running `{keeper.command} keeper run`")

    def _remove_head(self, head: str, keeper) -> Plan:
        if not keeper.installed:
            return self.noop(head, "no keeper installed")
        why = "sparkctl down: nothing may bring back what it stops" if self.options.remove else "keeper.enabled is false"
        return self.changes(head, [Change("remove", f"stop, disable and remove {unit.UNIT} and {unit.DIR} ({why})")])

    def files(self, ctx: RunContext, command: str) -> dict[str, str]:
        """path on the head -> the text it must hold."""
        inv = ctx.inventory
        out = {unit.INVENTORY: keeper_inventory(inv), unit.UNIT_PATH: render_unit(inv, command)}
        if ctx.fleet is not None:  # the keys this run's connections verified (a test's recorded facts have none)
            keys = {h: ctx.fleet[h].paramiko_client.get_transport().get_remote_server_key() for h in inv.hosts}
            out[unit.KNOWN_HOSTS] = known_hosts_lines(inv, keys)
        return out

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        s = ctx.session(plan.host)
        done = []
        for c in plan.changes:
            if c.action == "keygen":
                done.append(self._keygen(ctx, plan.host))
            elif c.action == "authorize":
                done.append(self._authorize(ctx, plan.host))
            elif c.action == "deauthorize":
                _run(
                    s,
                    plan.host,
                    f"sed -i {shlex.quote('/' + unit.key_comment(ctx.inventory.cluster.name) + '$/d')} ~/.ssh/authorized_keys",
                    "remove the keeper key",
                )
                done.append("keeper key removed from authorized_keys")
            elif c.action == "write":
                done.append(self._write(ctx, plan.host, c.data["path"]))
            elif c.action == "enable":
                done.append(self._enable(s, plan.host))
            elif c.action == "remove":
                _run(
                    s,
                    plan.host,
                    f"systemctl disable --now {unit.UNIT} 2>/dev/null; rm -f {unit.UNIT_PATH}; "
                    f"rm -rf {unit.DIR}; systemctl daemon-reload",
                    "remove the keeper",
                )
                done.append(f"{unit.UNIT} stopped and removed")
        return "; ".join(done)

    def _keygen(self, ctx: RunContext, host: str) -> str:
        q = shlex.quote(unit.KEY)
        comment = shlex.quote(unit.key_comment(ctx.inventory.cluster.name))
        r = _run(
            ctx.session(host),
            host,
            f"mkdir -p -m 0700 {unit.DIR} && rm -f {q} {q}.pub && "
            f"ssh-keygen -q -t ed25519 -N '' -C {comment} -f {q} && cat {q}.pub",
            "create the keeper key",
        )
        ctx.outputs.keeper_public_key = r.stdout.strip()
        return f"created {unit.KEY}"

    def _authorize(self, ctx: RunContext, host: str) -> str:
        head = ctx.inventory.hosts_with_role("head")[0]
        head_unit = ctx.facts[head].keeper_unit
        pub = ctx.outputs.keeper_public_key or (head_unit.public_key if head_unit else None)
        if not pub:
            raise HostError(f"{host}: the head's keeper key is not known (its creation failed?)", fix="run `sparkctl up` again")
        comment = shlex.quote("/" + unit.key_comment(ctx.inventory.cluster.name) + "$/d")
        _run(
            ctx.session(host),
            host,
            "mkdir -p -m 0700 ~/.ssh && touch ~/.ssh/authorized_keys && "
            f"sed -i {comment} ~/.ssh/authorized_keys && "
            f"printf '%s\\n' {shlex.quote(pub)} >> ~/.ssh/authorized_keys && "
            "chmod 600 ~/.ssh/authorized_keys",
            "authorise the keeper key",
        )
        return "keeper key authorised"

    def _write(self, ctx: RunContext, host: str, path: str) -> str:
        keeper = ctx.facts[host].keeper_unit
        assert keeper is not None and keeper.command is not None  # else the plan was blocked (_head)
        text = self.files(ctx, keeper.command)[path]
        s = ctx.session(host)
        _run(s, host, f"mkdir -p -m 0700 {unit.DIR} && mkdir -p {shlex.quote(path.rsplit('/', 1)[0])}", "keeper folders")
        s.put_bytes(text.encode(), path, mode=0o644 if path == unit.UNIT_PATH else 0o600)
        return f"wrote {path}"

    def _enable(self, s, host: str) -> str:
        _run(
            s,
            host,
            f"systemctl daemon-reload && systemctl enable {unit.UNIT} && systemctl restart {unit.UNIT}",
            f"enable {unit.UNIT}",
        )
        deadline = time.monotonic() + ACTIVE_WAIT_S
        while True:
            state = s.run(f"systemctl is-active {unit.UNIT} || true").stdout.strip()
            if state == "active":
                return f"{unit.UNIT} enabled and active"
            if time.monotonic() > deadline:
                raise HostError(
                    f"{host}: {unit.UNIT} is {state or 'not active'} {ACTIVE_WAIT_S:g} s after its start",
                    fix=f"read `journalctl -u {unit.UNIT}` on {host}",
                )
            time.sleep(0.5)


def _run(session, host: str, command: str, what: str):
    r = session.run(command)
    if not r.ok:
        raise HostError(
            f"{host}: {what} failed: {(r.stderr.strip() or r.stdout.strip())[:300]}", fix=f"check {host}'s disk and permissions"
        )
    return r
