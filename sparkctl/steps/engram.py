"""Engram step (offload host): the model's Engram tables in a RAM-backed mount, checksums verified.

sPLIce keeps ~220 GiB of Engram tables in the x86 host's RAM (seed 000). The step:
1. refuses when the host lacks the free RAM the inventory says the tables need;
2. mounts a tmpfs of `size_gib` at `target` (if not already a big enough tmpfs);
3. copies the tables from `source` and verifies every file's SHA-256 against the source's
   `SHA256SUMS` (computed from the source when it ships none);
4. writes `.sparkctl-placed` (the sums it verified) into the mount.
"Already placed" means a tmpfs of the right size whose files' SHA-256 and `.sparkctl-placed` match
the source's sums. Every run re-hashes, in the facts round trip, each file whose size or ctime
moved since it was verified (any write moves ctime: a flipped byte shows; hashing all ~220 GiB
every run would take minutes); a missing, truncated or corrupt file is copied again, only those.
"""

from __future__ import annotations

import shlex

from sparkctl.errors import HostError
from sparkctl.facts.engram import MARKER, stat_command
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step

GIB = 1 << 30


class EngramStep(Step):
    name = "engram"
    # the RAM copy's files that changed since placement are re-hashed: sizes alone miss a flipped byte
    facts = frozenset({"meminfo", "engram", "engram_hashes", "engram_source_hashes"})

    def hosts(self, inv: Inventory) -> list[str]:
        return [inv.engram.host] if inv.engram else []

    def plan_host(self, ctx: RunContext, host: str) -> Plan:
        e = ctx.inventory.engram_placement
        f = ctx.facts[host]
        g = f.engram
        if g is None:
            return self.blocked(host, f"cannot read the Engram placement: {f.errors.get('engram', 'no answer')}")
        want = g.source_sums or f.engram_source_hashes or {}
        if not want:
            return self.blocked(host, f"no Engram tables at {e.source} ({f.errors.get('engram_source_hashes', 'empty')[:120]})")
        size = int(e.size_gib * GIB)
        mounted = g.mount_fs == "tmpfs" and (g.mount_bytes or 0) >= size
        have = f.engram_hashes or {}
        bad = sorted(n for n, h in want.items() if have.get(n) != h)
        if mounted and not bad and g.placed_sums == want:
            if f.engram_rehashed:
                return self.changes(
                    host,
                    [
                        Change(
                            "mark",
                            f"record size and ctime of {len(f.engram_rehashed)} re-hashed file(s) (their SHA-256 match)",
                            {"sums": want},
                        )
                    ],
                )
            return self.noop(
                host,
                f"{len(want)} table file(s) placed in tmpfs {e.target} ({(g.mount_bytes or 0) / GIB:.2f} GiB), every SHA-256 matches",
            )
        changes = []
        if not mounted:
            need = int(e.min_free_gib * GIB)
            free = f.meminfo.get("MemAvailable", 0)
            if free < need:
                return self.blocked(host, f"{free / GIB:.1f} GiB RAM available, the tables need {e.min_free_gib:g} GiB free")
            now = "not mounted" if not g.mount_fs else f"{g.mount_fs} of {(g.mount_bytes or 0) / GIB:.2f} GiB"
            changes.append(Change("mount", f"mount tmpfs of {e.size_gib:g} GiB at {e.target} ({now})", {"bytes": size}))
            bad = sorted(want)  # a new mount is empty
        if bad:
            missing = [n for n in bad if n not in have]
            why = (
                "placing"
                if len(bad) == len(want)
                else (f"{len(missing)} missing, {len(bad) - len(missing)} with a wrong SHA-256: {', '.join(bad[:3])}")
            )
            changes.append(
                Change(
                    "copy",
                    f"copy {len(bad)} table file(s) from {e.source} and verify SHA-256 ({why})",
                    {"files": bad, "sums": want, "sizes": g.source_files},
                )
            )
        else:
            changes.append(Change("mark", f"record the {len(want)} verified sums in {e.target}/{MARKER}", {"sums": want}))
        return self.changes(host, changes)

    def apply(self, ctx: RunContext, plan: Plan) -> str:
        e = ctx.inventory.engram_placement
        s = ctx.session(plan.host)
        t, src = shlex.quote(e.target), shlex.quote(e.source)
        done = []
        for c in plan.changes:
            if c.action == "mount":
                s.run(
                    f"mkdir -p {t} && (mountpoint -q {t} && umount {t} || true) && "
                    f"mount -t tmpfs -o size={c.data['bytes']},mode=0755 sparkctl-engram {t}"
                ).check("Engram tmpfs mount")
                done.append(f"mounted tmpfs at {e.target}")
            elif c.action == "copy":
                ctx.progress(plan.host, self.name, f"copying {len(c.data['files'])} Engram table file(s) into {e.target}")
                files = " ".join(shlex.quote(n) for n in c.data["files"])
                # the marker stays: files copied now have a new ctime, so only they are re-hashed below
                size = sum(g for n, g in (c.data.get("sizes") or {}).items() if n in c.data["files"])
                s.run(f"cd {src} && cp -a --parents {files} {t}/", timeout=s.transfer_timeout(size)).check("Engram copy")
                self._verify_and_mark(ctx, plan.host, c.data["sums"], size)
                done.append(f"copied {len(c.data['files'])} table file(s)")
            elif c.action == "mark":
                self._verify_and_mark(ctx, plan.host, c.data["sums"])
                done.append("recorded the verified sums")
        return "; ".join(done) + f"; every SHA-256 in {e.target} verified"

    def _verify_and_mark(self, ctx: RunContext, host: str, sums: dict[str, str], nbytes: int = 0) -> None:
        e = ctx.inventory.engram_placement
        # re-hashes what was just copied (its ctime moved): as long as reading those bytes takes
        got = (
            ctx.refresh(host, {"engram", "engram_hashes"}, timeout=ctx.session(host).transfer_timeout(nbytes)).engram_hashes or {}
        )
        bad = sorted(n for n, h in sums.items() if got.get(n) != h)
        if bad:
            raise HostError(
                f"{host}: Engram checksum mismatch after copy: {', '.join(bad[:5])}",
                fix=f"check {e.source} (disk errors?) and the SHA256SUMS it ships, then rerun `sparkctl up`",
            )
        marker = "".join(f"{h}  {n}\n" for n, h in sorted(sums.items()))
        ctx.session(host).put_bytes(marker.encode(), f"{e.target}/{MARKER}", mode=0o644)
        # what was verified, by size and ctime: a later write to any file shows, and is re-hashed
        ctx.session(host).run(stat_command(e.target)).check("Engram placement record")
