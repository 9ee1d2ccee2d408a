"""images: the runtime (and drafter) image on every node that runs it, with the same image ID.

Identity is the image ID (config digest), never RepoDigests: a side-loaded image has none
(spark-fabric.md). The reference ID is the head's, as `sparkctl up` converges on it.
"""

from __future__ import annotations

from sparkctl.checks.base import Context, cluster_check, fail, host_check, ok, skipped
from sparkctl.checks.host import runtime_hosts
from sparkctl.facts.host import images_for

# the fact kinds (sparkctl/facts/host.py) this group's checks read: gathered for them
READS = frozenset({"image", "containers"})


def _short(image_id: str) -> str:
    return image_id.split(":", 1)[-1][:12]


@host_check("images.present", "the runtime/drafter image is present on each node that runs it", scope=runtime_hosts, runbook=True)
def present(ctx: Context, host: str, f):
    out = []
    for ref in images_for(ctx.inventory, host):
        fact = f.images.get(ref)
        if fact is None:
            out.append(skipped("not inspected", ref))
        elif fact.id:
            out.append(ok(f"present ({_short(fact.id)})", ref, id=fact.id))
        elif fact.error and fact.error != "not present":
            out.append(fail(f"docker did not answer: {fact.error}", f"start the Docker engine on {host}: `systemctl start docker`", ref))
        else:
            out.append(
                fail(
                    f"{ref} is not present on {host}",
                    f"`sparkctl up` pulls it (by hand: `docker pull {ref}` on {host}; without a registry: "
                    f"`docker save {ref} | ssh {host} docker load`)",
                    ref,
                )
            )
    return out


@cluster_check("images.same", "every node has the same image ID for each image (the head's)", scope=runtime_hosts, runbook=True)
def same(ctx: Context):
    out: dict[str, list] = {}
    refs: dict[str, dict[str, str | None]] = {}
    for h in runtime_hosts(ctx):
        if h not in ctx.facts:
            continue
        for ref in images_for(ctx.inventory, h):
            fact = ctx.facts[h].images.get(ref)
            refs.setdefault(ref, {})[h] = fact.id if fact else None
    heads = set(ctx.inventory.hosts_with_role("head"))
    for ref, ids in refs.items():
        have = {h: i for h, i in ids.items() if i}
        ref_host = next((h for h in have if h in heads), next(iter(have), None))
        for h, i in ids.items():
            if not i:
                out.setdefault(h, []).append(skipped("not present (see images.present)", ref))
            elif len(have) == 1:
                out.setdefault(h, []).append(ok(f"{_short(i)} (no other node to compare)", ref))
            elif i == have[ref_host]:
                out.setdefault(h, []).append(ok(f"{_short(i)} on {', '.join(have)}", ref, id=i))
            else:
                out.setdefault(h, []).append(
                    fail(
                        f"{ref} is {_short(i)} here but {_short(have[ref_host])} on {ref_host}: the nodes would run different code",
                        f"`sparkctl up` copies {ref_host}'s image; by hand: `docker save {ref} | ssh {h} docker load` "
                        f"from {ref_host}, then `docker image inspect -f '{{{{.Id}}}}' {ref}` on both",
                        ref,
                        id=i,
                        reference=have[ref_host],
                    )
                )
    return out
