"""ssh: each host reachable with a verified host key, root (or passwordless sudo), clocks that agree."""

from __future__ import annotations

import statistics
from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, cluster_check, fail, host_check, ok, skipped

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"clock", "whoami"})

CLOCK_SKEW_FAIL = 1.0  # seconds between hosts: Ray heartbeats, TLS and log correlation go wrong beyond this


@cluster_check("ssh.reachable", "an SSH session opens to the host's management address", needs_reach=False)
def reachable(ctx: Context):
    out = {}
    for h in ctx.hosts:
        t = ctx.inventory.ssh_target(h)
        where = t.where
        u = ctx.unreachable.get(h)
        if u is None:
            out[h] = ok(f"connected to {where}")
        elif u.reason == "host_key":
            out[h] = ok(f"sshd answers at {where} (its host key is refused: see ssh.host_key)")
        else:
            out[h] = fail(u.message, u.fix or f"check the host is up, sshd runs and ssh.address/port for {h} are right")
    return out


@cluster_check("ssh.host_key", "the host's key matches known_hosts (never auto-added)", needs_reach=False)
def host_key(ctx: Context):
    out = {}
    for h in ctx.hosts:
        t = ctx.inventory.ssh_target(h)
        u = ctx.unreachable.get(h)
        if u is None:
            out[h] = ok(f"host key verified against {t.known_hosts} (policy {t.host_key_policy})")
        elif u.reason == "host_key":
            out[h] = fail(u.message, u.fix or f"verify the host's key and update {t.known_hosts}")
        elif u.reason == "auth":  # the key was verified before authentication was tried
            out[h] = ok(f"host key verified against {t.known_hosts}; authentication failed (see ssh.reachable)")
        else:
            out[h] = skipped("no SSH session (see ssh.reachable)")
    return out


@host_check("ssh.privilege", "the SSH user is root or has passwordless sudo (sparkctl changes network, docker, mounts)")
def privilege(ctx: Context, host: str, f: HostFacts):
    if f.uid is None:
        return skipped(f"could not read the user id: {f.errors.get('whoami', 'no answer')}")
    if f.uid == 0:
        return ok(f"logged in as {f.user or 'root'} (uid 0)")
    if f.sudo:
        return ok(f"{f.user} has passwordless sudo")
    return fail(
        f"{f.user} (uid {f.uid}) is not root and `sudo -n true` asks for a password",
        f"log in as root (ssh.user: root) or allow {f.user} passwordless sudo: "
        f"echo '{f.user} ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/sparkctl",
    )


@cluster_check("ssh.clock", f"host clocks agree within {CLOCK_SKEW_FAIL:g} s")
def clock(ctx: Context):
    offsets = {h: f.clock_offset for h, f in ctx.facts.items() if f.clock_offset is not None}
    out = {h: skipped("clock not read") for h in ctx.facts if h not in offsets}
    if not offsets:
        return out
    median = statistics.median(offsets.values())
    for h, off in offsets.items():
        skew = off - median
        others = f"{skew:+.3f} s from the other hosts" if len(offsets) > 1 else "only host read"
        if abs(skew) > CLOCK_SKEW_FAIL:
            out[h] = fail(
                f"clock is {others} (limit {CLOCK_SKEW_FAIL:g} s)",
                "enable time sync on every host: `timedatectl set-ntp true` (or chrony), then `timedatectl` "
                "shows 'System clock synchronized: yes'",
                skew_s=round(skew, 3),
            )
        else:
            out[h] = ok(f"clock {others}", skew_s=round(skew, 3))
    return out
