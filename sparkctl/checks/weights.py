"""weights: every node holds the checkpoint it loads, whole and as verified (facts/weights.py)."""

from __future__ import annotations

from typing import TYPE_CHECKING

from sparkctl.checks.base import Context, fail, host_check, ok, skipped, warn
from sparkctl.facts.weights import WeightsCopy, WeightsRecord
from sparkctl.placement import Placement, model_folders, placements

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"weights", "weights_hashes"})
GB = 1e9
PLACE = "`sparkctl up` (it downloads once, copies to the other nodes over the fabric, and verifies every file)"


def _hosts(ctx: Context) -> list[str]:
    return list(dict.fromkeys(h for h, _ in model_folders(ctx.inventory) if h in ctx.hosts))


def _folders(ctx: Context, host: str) -> list[str]:
    return [path for h, path in model_folders(ctx.inventory) if h == host]


def _absent(copy: WeightsCopy) -> str:
    if copy.not_a_directory:
        return f"{copy.path} is not a folder"
    return f"no checkpoint at {copy.path}" if not copy.present else f"{copy.path} is empty"


@host_check(
    "weights.present",
    "each node holds a checkpoint at the path its container loads (runtime.model, the "
    "drafter's); an empty folder there makes the engine fail minutes into its start",
    scope=_hosts,
)
def present(ctx: Context, host: str, f: HostFacts):
    for path in _folders(ctx, host):
        copy = f.weights.get(path)
        if copy is None:
            yield skipped(f"not read: {f.errors.get('weights', 'no answer')}", target=path)
        elif copy.files:
            yield ok(f"{len(copy.files)} file(s), {copy.bytes / GB:.2f} GB at {path}", target=path)
        elif copy.links:  # a hub cache's snapshot folder: links into its blobs, which vLLM loads through
            yield ok(f"{path} holds symbolic links (a hub cache's snapshot folder?)", target=path)
        elif ctx.inventory.weights is not None:  # sparkctl places it: not a blocker for `up`
            yield warn(f"{_absent(copy)}: not placed yet", PLACE, target=path)
        else:
            yield fail(
                _absent(copy),
                f"put the checkpoint's files at {path} on {host} (docker would mount an empty folder), or add a "
                "`weights` section to the inventory so `sparkctl up` places it (docs/weights.md)",
                target=path,
            )


def _manifest_record(ctx: Context, p: Placement) -> WeightsRecord | None:
    """The record this copy is judged by: its own, else its download host's, when it names the
    inventory's checkpoint (doctor never asks the hub)."""
    for host in (p.host, p.source_host):
        facts = ctx.facts.get(host)
        copy = facts.weights.get(p.path) if facts is not None else None
        if copy is not None and copy.record is not None and copy.record.names(p.checkpoint):
            return copy.record
    return None


@host_check(
    "weights.verified",
    "each node's copy matches the hub's manifest: every file there, of its size, its "
    "digest as verified (files changed since are re-hashed; --deep re-hashes all)",
    scope=_hosts,
)
def verified(ctx: Context, host: str, f: HostFacts):
    mine = [p for p in placements(ctx.inventory) if p.host == host]
    if not mine:
        yield skipped("no `weights` section: sparkctl does not place this checkpoint (see weights.present)")
        return
    for p in mine:
        copy, want = f.weights.get(p.path), f"{p.checkpoint.repo}@{p.checkpoint.revision}"
        if copy is None:
            yield skipped(f"not read: {f.errors.get('weights', 'no answer')}", target=p.path)
            continue
        staged = f"; {sum(copy.staging.values()) / GB:.2f} GB of a cut transfer staged, which up resumes" if copy.staging else ""
        if not copy.files:
            yield fail(f"absent: {_absent(copy)}{staged}", PLACE, target=p.path)
            continue
        rec = _manifest_record(ctx, p)
        if rec is None:
            yield warn(
                f"{len(copy.files)} file(s) at {p.path}, not verified against {want} (no record of it on this "
                f"node or {p.source_host}){staged}",
                PLACE,
                target=p.path,
            )
            continue
        hashes = f.weights_hashes.get(p.path, {})
        missing = sorted(n for n in rec.files if n not in copy.files)
        sized = sorted(n for n, m in rec.files.items() if n in copy.files and copy.files[n] != m.size)
        corrupt = sorted(n for n, m in rec.files.items() if n in hashes and n not in sized and not m.matches(hashes[n]))
        source = f"{rec.repo}@{rec.commit[:12]}"
        problems = [
            (missing, "missing"),
            (sized, "of the wrong size"),
            (corrupt, "whose digest no longer matches"),
        ]
        found = [f"{len(names)} file(s) {what}: {', '.join(names[:3])}" for names, what in problems if names]
        if found:
            yield fail(
                f"{source} at {p.path}: " + "; ".join(found) + staged,
                f"`sparkctl up` replaces exactly those file(s) (from {p.source_host}, verified)",
                target=p.path,
                missing=missing,
                wrong_size=sized,
                corrupt=corrupt,
            )
        elif copy.record is None or not copy.record.names(p.checkpoint):
            yield warn(f"{len(rec.files)} file(s) at {p.path} match {source} by size, never verified here", PLACE, target=p.path)
        else:
            deep = " (every file re-hashed)" if ctx.deep else ""
            size = sum(m.size for m in rec.files.values()) / GB
            yield ok(f"{source}: {len(rec.files)} file(s), {size:.2f} GB verified{deep}{staged}", target=p.path)
