"""engram: the offload host has the RAM the tables need; tables placed in RAM; checksums agree."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, fail, host_check, ok, skipped, warn

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"meminfo", "engram"})

GIB = 1 << 30
PLACE = "`sparkctl up` places them (mounts a tmpfs at the target, copies and verifies)"


def engram_host(ctx: Context) -> list[str]:
    e = ctx.inventory.engram
    return [e.host] if e and e.host in ctx.hosts else []


def _placed(ctx: Context, f: HostFacts) -> bool:
    e, g = ctx.inventory.engram_placement, f.engram
    return bool(g and g.ram_backed and g.placed_sums and (g.mount_bytes or 0) >= e.size_gib * GIB * 0.99)


@host_check("engram.memory", "the offload host has the free RAM the Engram tables need", scope=engram_host)
def memory(ctx: Context, host: str, f: HostFacts):
    e = ctx.inventory.engram_placement
    avail = f.meminfo.get("MemAvailable")
    if avail is None:
        return skipped("MemAvailable not read")
    gib = avail / GIB
    if f.engram is not None and _placed(ctx, f):
        return ok(f"tables placed in RAM; {gib:.1f} GiB still available", available_gib=round(gib, 1))
    if gib < e.min_free_gib:
        return fail(
            f"{gib:.1f} GiB RAM available, placing the tables needs {e.min_free_gib:g} GiB free",
            f"free memory on {host} (stop other workloads, drop page cache: `sync; echo 1 > /proc/sys/vm/drop_caches`) "
            "or move the tables to a host with more RAM (engram.host)",
            available_gib=round(gib, 1),
        )
    return ok(f"{gib:.1f} GiB RAM available, {e.min_free_gib:g} GiB needed", available_gib=round(gib, 1))


@host_check("engram.placed", "the tables sit in a RAM-backed mount at the target, at full size", scope=engram_host)
def placed(ctx: Context, host: str, f: HostFacts):
    e, g = ctx.inventory.engram_placement, f.engram
    if g is None:
        return skipped(f"not read: {f.errors.get('engram', 'no answer')}")
    if not g.source_files:
        return fail(
            f"no Engram tables at {e.source} on {host}: nothing to place",
            f"copy the tables to {e.source} on {host} (or fix engram.source)",
        )
    if g.mount_fs is None:
        return warn(f"not placed: {e.target} is not a mount", PLACE)
    if not g.ram_backed:
        return fail(f"{e.target} is a {g.mount_fs} mount, not RAM-backed (tmpfs)", f"unmount it; {PLACE}")
    size = (g.mount_bytes or 0) / GIB
    if size < e.size_gib * 0.99:
        return warn(f"{e.target} is a {g.mount_fs} of {size:.2f} GiB, the tables need {e.size_gib:g} GiB", PLACE)
    missing = sorted(set(g.tables(g.source_files)) - set(g.target_files))
    if missing:
        return warn(
            f"{len(missing)} of {len(g.tables(g.source_files))} table file(s) missing in {e.target}: {', '.join(missing[:3])}",
            PLACE,
        )
    if not g.placed_sums:
        return warn(f"{e.target} holds the files but no placement record (.sparkctl-placed): not verified", PLACE)
    return ok(f"{len(g.placed_sums)} table file(s), {g.target_bytes / GIB:.2f} GiB in {g.mount_fs} {e.target}")


@host_check("engram.checksums", "the RAM copy matches the source (sizes; sums; --deep re-hashes it)", scope=engram_host)
def checksums(ctx: Context, host: str, f: HostFacts):
    e, g = ctx.inventory.engram_placement, f.engram
    if g is None or not _placed(ctx, f):
        return skipped("tables not placed (see engram.placed)")
    fix = f"re-place them: `sparkctl up` (it copies again from {e.source} and verifies every SHA-256)"
    sizes = [n for n, s in g.tables(g.source_files).items() if g.target_files.get(n) != s]
    if sizes:
        return fail(f"{len(sizes)} file(s) differ in size from {e.source}: {', '.join(sorted(sizes)[:3])}", fix)
    if g.source_sums and g.source_sums != g.placed_sums:
        bad = sorted(n for n in set(g.source_sums) | set(g.placed_sums) if g.source_sums.get(n) != g.placed_sums.get(n))
        return fail(f"the placement record differs from {e.source}/SHA256SUMS for {', '.join(bad[:3])}: the source changed", fix)
    if f.engram_hashes is not None:  # --deep
        got = f.engram_hashes
        bad = sorted(n for n in g.placed_sums if got.get(n) != g.placed_sums[n])
        if "engram_hashes" in f.errors or bad:
            detail = ", ".join(bad[:3]) or f.errors["engram_hashes"][:200]
            return fail(f"re-hashing {e.target} disagrees with the placement record: {detail}", fix)
        return ok(f"{len(got)} file(s) re-hashed in RAM: every SHA-256 matches")
    basis = "the source's SHA256SUMS" if g.source_sums else "the sums verified at placement"
    return ok(f"{len(g.placed_sums)} file(s): sizes match {e.source}, recorded sums match {basis} (--deep re-hashes)")
