"""Engram step (offload host): the model's Engram tables in a RAM-backed mount, checksums verified.

sPLIce keeps ~220 GiB of Engram tables in the x86 host's RAM (seed 000). The step:
1. refuses when the host lacks the free RAM the inventory says the tables need;
2. mounts a tmpfs of `size_gib` at `target` (if not already a big enough tmpfs);
3. copies the tables from `source` and verifies every file's SHA-256 against the source's
   `SHA256SUMS` (computed from the source when it ships none);
4. writes `.sparkctl-placed` (the sums it verified) into the mount.
Re-hashing hundreds of GiB on every run would make `up` slow, so "already placed" means: a tmpfs
of the right size whose `.sparkctl-placed` matches the source's sums and file sizes.
"""

from __future__ import annotations

import shlex

from sparkctl.errors import HostError
from sparkctl.facts import system
from sparkctl.facts.engram import MARKER, parse_sums
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step

GIB = 1 << 30


def sums_command(directory: str) -> str:
    """The source's SHA256SUMS if it ships one, else computed (sorted, relative names)."""
    d = shlex.quote(directory)
    return f"cd {d} && if [ -f SHA256SUMS ]; then cat SHA256SUMS; else find . -type f ! -name SHA256SUMS ! -name {MARKER} | sort | xargs -r sha256sum; fi"


def parse_mount(text: str) -> tuple[str, int] | None:
    """`df -B1 --output=fstype,size TARGET` restricted to an exact mount -> (fstype, bytes)."""
    lines = [ln.split() for ln in text.strip().splitlines() if ln.strip()]
    if len(lines) >= 2 and len(lines[-1]) >= 2 and lines[-1][1].isdigit():
        return lines[-1][0], int(lines[-1][1])
    return None


class EngramStep(Step):
    name = "engram"
    description = "Engram tables in the offload host's RAM (tmpfs), checksums verified"

    def hosts(self, inv: Inventory) -> list[str]:
        return [inv.engram.host] if inv.engram else []

    def probes(self, inv: Inventory, host: str) -> dict[str, str]:
        e = inv.engram
        t = shlex.quote(e.target)
        return {
            "meminfo": "cat /proc/meminfo",
            # only when target is itself a mount point (mountpoint is util-linux, on every Debian/DGX OS)
            "mount": f"mountpoint -q {t} && df -B1 --output=fstype,size {t}",
            "source_sums": sums_command(e.source),
            "placed": f"cat {t}/{MARKER}",
        }

    def plan(self, ctx: RunContext, host: str) -> Plan:
        e = ctx.inventory.engram
        src = ctx.section(host, "source_sums")
        want = parse_sums(src.out) if src.ok else {}
        if not want:
            return Plan(self.name, host, blocked=f"no Engram tables at {e.source} ({src.out.strip()[:120] or 'empty'})")
        size = int(e.size_gib * GIB)
        mount = parse_mount(ctx.section(host, "mount").out) if ctx.section(host, "mount").ok else None
        placed = parse_sums(ctx.section(host, "placed").out) if ctx.section(host, "placed").ok else {}
        if mount and mount[0] == "tmpfs" and mount[1] >= size and placed == want:
            return self.noop(host, f"{len(want)} table file(s) already placed in tmpfs {e.target} ({mount[1] / GIB:.2f} GiB), sums match")
        free = system.parse_meminfo(ctx.section(host, "meminfo").out).get("MemAvailable", 0)
        need = int(e.min_free_gib * GIB)
        changes = []
        if not mount or mount[0] != "tmpfs" or mount[1] < size:
            if free < need:
                return Plan(
                    self.name, host,
                    blocked=f"{free / GIB:.1f} GiB RAM available, the tables need {e.min_free_gib:g} GiB free",
                )  # fmt: skip
            now = "not mounted" if not mount else f"{mount[0]} of {mount[1] / GIB:.2f} GiB"
            changes.append(Change("mount", f"mount tmpfs of {e.size_gib:g} GiB at {e.target} ({now})", {"bytes": size}))
        changes.append(
            Change("copy", f"copy {len(want)} table file(s) from {e.source} and verify SHA-256", {"sums": want})
        )
        return self.changes(host, changes)

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        e = ctx.inventory.engram
        s = ctx.fleet[plan.host]
        t, src = shlex.quote(e.target), shlex.quote(e.source)
        for c in plan.changes:
            if c.action == "mount":
                s.run(
                    f"mkdir -p {t} && (mountpoint -q {t} && umount {t} || true) && "
                    f"mount -t tmpfs -o size={c.data['bytes']},mode=0755 sparkctl-engram {t}"
                ).check("Engram tmpfs mount")
            elif c.action == "copy":
                ctx.progress(plan.host, self.name, f"copying Engram tables into {e.target}")
                s.run(f"rm -f {t}/{MARKER} && cp -a {src}/. {t}/").check("Engram copy")
                got = parse_sums(s.run(f"cd {t} && " + " ".join(["sha256sum", *map(shlex.quote, c.data["sums"])])).stdout)
                bad = sorted(f for f, h in c.data["sums"].items() if got.get(f) != h)
                if bad:
                    raise HostError(
                        f"{plan.host}: Engram checksum mismatch after copy: {', '.join(bad[:5])}",
                        fix=f"check {e.source} (disk errors?) and the SHA256SUMS it ships, then rerun `sparkctl up`",
                    )
                marker = "".join(f"{h}  {f}\n" for f, h in sorted(c.data["sums"].items()))
                s.put_bytes(marker.encode(), f"{e.target}/{MARKER}", mode=0o644)
        return f"placed {len(plan.changes[-1].data['sums'])} table file(s) in {e.target}, checksums verified"
