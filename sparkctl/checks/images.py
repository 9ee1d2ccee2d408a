"""images: the runtime (and drafter) image on every node that runs it, and the right one.

Images are compared by identity (facts/docker.py: layer diff IDs + platform + run config), never
by docker's `Id` or RepoDigests: the classic store's Id is the config digest, containerd's store's
the index/manifest digest (one image, two IDs in a mixed cluster), and a side-loaded image has no
RepoDigest (spark-fabric.md). The reference is the image `sparkctl up` last verified for each node
(the head's applied.json, recorded after the registry or the record proved it), so the node that
drifted is the one named, the head included; with no record, the image most nodes hold.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from typing import TYPE_CHECKING, Optional

from sparkctl.checks.base import Context, cluster_check, fail, host_check, ok, skipped
from sparkctl.checks.host import runtime_hosts
from sparkctl.facts.docker import ImageFact, images_for
from sparkctl.steps.images import last_good, platform_of
from sparkctl.transport.image_identity import short as _short

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts

READS = frozenset({"image", "containers", "applied"})


def _store(fact: ImageFact) -> str:
    return "containerd image store, " if fact.store == "containerd" else ""


@host_check("images.present", "the runtime/drafter image is present on each node that runs it", scope=runtime_hosts, runbook=True)
def present(ctx: Context, host: str, f: HostFacts):
    for ref in images_for(ctx.inventory, host):
        fact = f.images.get(ref)
        if fact is None:
            yield skipped("not inspected", ref)
        elif fact.id:
            yield ok(
                f"present (image {_short(fact.key)}; {_store(fact)}docker ID {_short(fact.id)})",
                ref,
                id=fact.id,
                identity=fact.key,
                store=fact.store,
            )
        elif fact.error and fact.error != "not present":
            yield fail(
                f"docker did not answer: {fact.error}", f"start the Docker engine on {host}: `systemctl start docker`", ref
            )
        else:
            yield fail(
                f"{ref} is not present on {host}",
                f"`sparkctl up` pulls it (by hand: `docker pull {ref}` on {host}; without a registry: "
                f"`docker save {ref} | ssh {host} docker load`)",
                ref,
            )


def _reference(have: dict[str, str]) -> Optional[str]:
    """Without a record: the image a strict majority of the nodes holds (None on a tie: nothing tells)."""
    counts = Counter(have.values()).most_common(1)
    if not counts:
        return None
    top, n = counts[0]
    return top if n * 2 > len(have) else None


@cluster_check(
    "images.same",
    "every node holds the image `sparkctl up` last verified (applied.json), else the one most nodes hold",
    scope=runtime_hosts,
    runbook=True,
)
def same(ctx: Context):
    out: dict[str, list] = defaultdict(list)
    refs: dict[str, dict[str, ImageFact]] = defaultdict(dict)  # image -> host -> what it holds
    for h in (h for h in runtime_hosts(ctx) if h in ctx.facts):
        for ref in images_for(ctx.inventory, h):
            refs[ref][h] = ctx.facts[h].images.get(ref) or ImageFact(ref, None)
    head = next(iter(ctx.inventory.hosts_with_role("head")), None)
    applied = ctx.facts[head].applied if head in ctx.facts else None
    for ref, facts in refs.items():
        have = {h: f.key for h, f in facts.items() if f.key}
        pin = ctx.inventory.runtime.image_digest if ref == ctx.inventory.runtime.image else None
        for h, fact in facts.items():
            i = fact.key
            if not i:
                out[h].append(skipped("not present (see images.present)", ref))
                continue
            peers = [p for p in ctx.inventory.hosts if p != h and platform_of(ctx.inventory, p) == platform_of(ctx.inventory, h)]
            record = last_good(applied, h, ref, pin, peers)
            want: str | None
            if record:
                want, basis = record[0], f"last verified by `sparkctl up` at {record[1]} (applied.json)"
            else:
                want, basis = _reference(have), "what most nodes hold (applied.json records no image)"
            holders = [p for p in have if p != h and facts[p].holds(want)]
            if want is None:
                seen = ", ".join(f"{p} {_short(x)}" for p, x in have.items())
                out[h].append(
                    fail(
                        f"{ref} differs between the nodes ({seen}) and no record says which is right",
                        "`sparkctl up` asks the registry which image the tag names and pulls it where it differs",
                        ref,
                        id=i,
                    )
                )
            elif fact.holds(want):
                others = f"; {', '.join(holders)} too" if holders else ""
                if len({facts[p].id for p in (h, *holders)}) > 1:  # one image, a docker ID per image store
                    stores = ", ".join(f"{p} {facts[p].store} {_short(facts[p].id)}" for p in (h, *holders))
                    others += f" (docker IDs differ with the image store: {stores})"
                out[h].append(ok(f"{_short(i)}: {basis}{others}", ref, id=i))
            else:
                src = holders[0] if holders else None
                src_id = facts[src].id if src else None  # the source's own docker ID: `docker save` takes it
                by_hand = (
                    (
                        f"; without a registry, from {src}: `docker save {src_id} | ssh {h} docker load`, then "
                        f"`docker tag <the ID load prints> {ref}` on {h}"
                    )
                    if src
                    else ""
                )
                out[h].append(
                    fail(
                        f"{ref} is {_short(i)} on {h}, should be {_short(want)} ({basis}"
                        f"{'; ' + ', '.join(holders) + ' hold it' if holders else ''}): {h} would run different code",
                        f"`sparkctl up` pulls {ref} from the registry on {h}{by_hand}",
                        ref,
                        id=i,
                        reference=want,
                    )
                )
    return out
