"""Images step: every node holds *the* image, the one its provenance names, or the run stops.

Provenance is decided once per run, before any plan: per image reference (runtime, drafter), the
registry is asked what the tag (or the inventory's `runtime.image_digest` pin) names now, through
the dockerd of the node that pulls it (the head when it runs the image: `asked_on`), over the SSH
connection the run holds, so neither the control machine's network nor its credentials matter
(transport/registry.py `ask_dockerd`, while the facts are gathered). That answer is a manifest
digest; the image it names is the one any node of the platform holds pulled as that digest
(ImageFact.pulled_as), and when none does (the tag moved, a first pull), the config this machine
reads from the registry if it can, else what the pull brings. Only when the node's dockerd cannot
reach the registry is the registry asked from this machine (transport/registry.py `resolve`, per
platform). Images are compared by identity (facts/docker.py: layers + run config), never by
docker's `Id`: the classic store's Id is the config digest, containerd's the index/manifest digest,
so one image has two IDs in a mixed cluster. When neither reaches the registry, the truth is the
identity recorded as last good for that node in the head's applied.json (written by the record
step after a verified run). Every node must then hold that image under the reference; anything
else is a drift named with what the node has and what it should have, head included (the head is
checked like every node).

Repairs, exactly as planned:
- the registry answered: the node pulls (by digest when pinned; a pull of a current image moves
  no layers); a node whose pull fails gets a copy from a verified node (one holding the truth);
- the registry did not answer: a node missing the image gets a copy from a verified node; a node
  holding a *different* image is not overwritten from a record (the registry, or the operator with
  --side-load, decides): its plan is blocked, so nothing anywhere is copied, with the exact fix;
- no registry and no record: nothing can be verified; nodes that all hold one ID pass (said so),
  any other state is blocked: an unverified image is never copied.
Copies use transport/images.py: only the layers the destination lacks, over the fabric when the
source node can SSH to the destination's rail, verified by image ID before the tag is set.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Callable, Optional

from sparkctl.errors import HostError, InputError, SparkctlError
from sparkctl.facts.docker import ImageFact, fact_of_inspect
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import Change, Plan, RunContext, Step
from sparkctl.transport.image_identity import short

if TYPE_CHECKING:  # httpx and docker-py load when a run asks, not when doctor imports this module
    from sparkctl.records import AppliedRecord
    from sparkctl.transport.registry import Resolved


def images_by_host(inv: Inventory) -> dict[str, list[str]]:
    from sparkctl.launch.plan import render

    out: dict[str, list[str]] = {}
    for c in render(inv).containers:
        if c.image not in out.setdefault(c.host, []):
            out[c.host].append(c.image)
    return out


def platform_of(inv: Inventory, host: str) -> str:
    """The platform a multi-arch tag resolves to on this node: DGX Spark (GB10) is arm64; the
    x86 offload host amd64."""
    gpu = inv.hosts[host].gpu
    return "linux/arm64" if gpu is None or "GB10" in (gpu.model or "") else "linux/amd64"


@dataclass(frozen=True)
class Truth:
    """What one node must hold under one image reference, and where that came from."""

    image_id: Optional[str]  # the image identity (facts/docker.py) to hold; None: nothing to verify against,
    # or (origin "registry") only the pull of `manifest` tells
    origin: str  # "registry", "record" or "none"
    detail: str  # for messages: "tag = manifest 1137302f5c0b", "last good in applied.json (...); the registry: ..."
    pull: Optional[str] = None  # what `docker pull` asks for when the registry answered (tag or name@digest)
    manifest: Optional[str] = None  # the digest the registry named (what a pull records: ImageFact.pulled_as)


def unknown_until_pulled(manifest: str) -> str:
    """What a node is predicted to hold when only pulling `manifest` tells its identity: never any
    image's identity, so whatever runs another image restarts (runtime's drift)."""
    return f"manifest:{manifest}"


def last_good(
    applied: Optional[AppliedRecord], host: str, ref: str, pin: Optional[str], peers: Optional[list[str]] = None
) -> Optional[tuple[str, str]]:
    """(image identity, when) recorded for `host` and `ref` by the last verified `up` (a docker ID in
    records of sparkctl before identities: ImageFact.holds takes both), if the record is for
    the same digest pin (a changed pin makes the old record no proof of the new one). A node the
    record does not cover takes the ID recorded for its `peers` (nodes of the same platform)."""
    if not applied:
        return None
    recorded_pin = applied.recorded("runtime", "image_digest")
    if pin and recorded_pin != pin:
        return None
    images = applied.images
    iid = (images.get(host) or {}).get(ref)
    if not iid:
        iid = next((images[p][ref] for p in peers or [] if images.get(p, {}).get(ref)), None)
    return (iid, applied.applied_at) if iid else None


def _asked(inv: Inventory, ref: str) -> str:
    pin = inv.runtime.image_digest if ref == inv.runtime.image else None
    return f"{ref}@{pin}" if pin else ref


def _field(inv: Inventory, ref: str) -> str:
    return "runtime.image" if ref == inv.runtime.image else "runtime.speculative.drafter_image"


def asked_on(inv: Inventory, ref: str) -> str:
    """The node whose dockerd is asked what `ref` names: the head when it runs the image (the run
    always holds its connection), else the first node that runs it."""
    runs = [h for h, refs in images_by_host(inv).items() if ref in refs]
    head = inv.hosts_with_role("head")[0]
    return head if head in runs else runs[0]


Ask = Callable[[RunContext, str, str], "Resolved"]  # (ctx, host, image) -> its dockerd's answer


def ask_node(ctx: RunContext, host: str, image: str) -> Resolved:
    """What `image` names, asked through `host`'s dockerd over the run's SSH connection (its
    deadline: ssh.timeout): first with what docker-py sends (this machine's docker login, if any),
    then, refused, with the host's own `docker login`."""
    from sparkctl.transport import registry
    from sparkctl.transport.docker import registry_auth

    session = ctx.session(host)
    via = f"{host}'s dockerd"
    try:
        client = session.docker()
    except SparkctlError as exc:
        raise registry.RegistryUnreachable(f"{via} could not be asked: {exc.message}") from None
    try:
        return registry.ask_dockerd(client, image, via)
    except registry.AccessDenied:
        auth = registry_auth(session, registry.Reference.parse(image).registry)
        if auth is None:
            raise
        return registry.ask_dockerd(client, image, f"{via} (with {host}'s docker login)", auth)


def registry_answers(
    ctx: RunContext, resolver: Optional[Callable[..., Any]] = None, ask: Optional[Ask] = None
) -> dict[tuple[str, str], Any]:
    """The registry's answer (or the error it gave) per (reference, platform): asked once per
    reference through the dockerd of the node that pulls it (`ask`; default `ask_node` when the
    run has SSH sessions), else from this machine (`resolver`) per platform. Needs no host facts,
    so the runner asks while it gathers them (Step.prepare). A registry this run may not contact
    (the network fence) is bad input: InputError naming the image's field."""
    from sparkctl.transport import registry

    inv = ctx.inventory
    resolver = resolver or registry.resolve
    ask = ask or (ask_node if ctx.fleet is not None else None)
    platforms: dict[str, list[str]] = {}  # ref -> the platforms of the nodes that run it
    for host, refs in images_by_host(inv).items():
        for ref in refs:
            if platform_of(inv, host) not in platforms.setdefault(ref, []):
                platforms[ref].append(platform_of(inv, host))
    answers: dict[tuple[str, str], Any] = {}
    for ref, wanted in platforms.items():
        asked = _asked(inv, ref)
        if (asked, wanted[0]) in answers:  # the drafter runs the runtime's image
            continue
        try:
            registry.check_fence(asked)
        except InputError as exc:
            raise InputError(
                f"{_field(inv, ref)} {ref}: {exc.message}", fix=f"{exc.fix}; or name an image on a registry inside it"
            ) from None
        node = asked_on(inv, ref)
        unreached: Optional[SparkctlError] = None  # why the node's dockerd gave no answer
        if ask is not None:
            try:
                got = ask(ctx, node, asked)
            except registry.TagNotFound as exc:  # the registry answered the node
                answers.update({(asked, p): exc for p in wanted})
                continue
            except SparkctlError as exc:
                unreached = exc
            else:
                for p in wanted:
                    answers[(asked, p)] = (
                        got
                        if registry.has_platform(got, p)
                        else registry.TagNotFound(
                            f"{asked} has no {p} image (the registry lists {', '.join(got.platforms) or 'none'}; {got.via})",
                            fix=f"build or push the image for {p}",
                        )
                    )
                continue
        for p in wanted:
            try:  # https, then http: the registries dockerd lists as insecure (the lab's) speak plain HTTP
                here = resolver(asked, platform=p, insecure=True)
                answers[(asked, p)] = replace(here, via=f"this machine, as {unreached.message}") if unreached else here
            except (registry.TagNotFound, registry.RegistryUnreachable) as exc:
                answers[(asked, p)] = _neither(exc, unreached, node, asked) if unreached else exc
            except InputError as exc:
                raise InputError(
                    f"{_field(inv, ref)} {ref}: {exc.message}", fix=f"{exc.fix}; or name an image on a registry inside it"
                ) from None
    return answers


def _neither(here: SparkctlError, node_error: SparkctlError, node: str, image: str) -> SparkctlError:
    """The node's dockerd got no answer and this machine's was an error too: both reasons, one fix."""
    from sparkctl.transport import registry

    if not isinstance(here, registry.RegistryUnreachable):  # the registry answered this machine: not there
        return type(here)(f"{here.message} (asked from this machine, as {node_error.message})", fix=here.fix)
    reg = registry.Reference.parse(image).registry
    why = node_error.message.removeprefix(f"{node}'s dockerd could not reach the registry {reg}: ")
    return type(here)(
        f"neither {node}'s dockerd nor this machine reached the registry {reg} ({node}'s dockerd: {why}; "
        f"this machine: {here.message})",
        fix=f"make {reg} reachable from {node} (`docker pull {image}` there prints docker's own error); "
        f"a private registry needs `docker login {reg}` on the nodes",
    )


def resolve_truths(
    ctx: RunContext, answers: dict[tuple[str, str], Any], lookup: Optional[Callable[[str, str], Optional[str]]] = None
) -> dict[str, dict[str, Truth]]:
    """host -> ref -> Truth, from the registry's answers (asked once per reference and platform).
    `lookup(name@digest, platform)`: the identity of a manifest no node holds, from this machine."""
    inv = ctx.inventory
    head = inv.hosts_with_role("head")[0]
    applied = ctx.facts[head].applied if head in ctx.facts else None
    out: dict[str, dict[str, Truth]] = {}
    for host, refs in images_by_host(inv).items():
        for ref in refs:
            pinned = inv.runtime.image_digest if ref == inv.runtime.image else None
            key = (_asked(inv, ref), platform_of(inv, host))
            peers = [h for h in inv.hosts if h != host and platform_of(inv, h) == key[1]]
            answer = identified(ctx, answers[key], ref, key[1], lookup)
            out.setdefault(host, {})[ref] = truth_from(answer, ref, pinned, host, applied, peers)
    return out


def identified(
    ctx: RunContext, answer: Any, ref: str, platform: str, lookup: Optional[Callable[[str, str], Optional[str]]] = None
) -> Any:
    """A dockerd's answer names a manifest, not an image: the image is the one a node holds pulled
    as that manifest (a node of `platform` for an index: each platform has its own image), else
    what this machine reads of it (`lookup`), else unknown until pulled (identity "")."""
    if isinstance(answer, SparkctlError) or answer.identity:
        return answer
    inv = ctx.inventory
    for h, facts in ctx.facts.items():
        fact = facts.images.get(ref)
        if fact is not None and fact.key and fact.pulled_as(answer.manifest_digest):
            if not answer.index or (h in inv.hosts and platform_of(inv, h) == platform):
                return replace(answer, identity=fact.key)
    found = lookup(f"{ref.partition('@')[0]}@{answer.manifest_digest}", platform) if lookup else None
    return replace(answer, identity=found) if found else answer


def truth_from(
    answer: Any, ref: str, pinned: Optional[str], host: str, applied: Optional[AppliedRecord], peers: Optional[list[str]] = None
) -> Truth:
    """The truth for one node from the registry's answer (a Resolved, or the error it gave)."""
    if not isinstance(answer, SparkctlError):
        digest = answer.manifest_digest
        what = f"pinned manifest {short(digest)}" if pinned else f"tag = manifest {short(digest)}"
        if answer.via:
            what += f", from {answer.via}"
        if not answer.identity:
            what += "; no node holds it yet: the pull tells what it is"
        pull = f"{ref.rpartition(':')[0] if ':' in ref.rsplit('/', 1)[-1] else ref}@{pinned}" if pinned else ref
        return Truth(answer.identity or None, "registry", what, pull, digest)
    why = answer.message
    record = last_good(applied, host, ref, pinned, peers)
    if record:
        return Truth(record[0], "record", f"last good in applied.json ({record[1]}); {why}")
    return Truth(None, "none", f"{why}; applied.json records no image for this node")


def _rail_speed(inv: Inventory, host: str, source: str) -> float:
    """Gb/s of the fastest rail between the two nodes (0: none, the copy is relayed): the source to prefer."""
    return max((link.speed_gbps or 0 for link in inv.hosts[host].fabric if link.peer == source), default=0)


def plan_images(
    inv: Inventory,
    have: dict[str, dict[str, Any]],
    truths: dict[str, dict[str, Truth]],
    side_load: bool,
    force_pull: bool,
    predicted: dict[str, dict[str, Optional[str]]],
    name: str = "images",
) -> dict[str, Plan]:
    """Pure: plans for every node from what each holds (ImageFact per ref) and the truths.
    Fills `predicted` (host -> ref -> the identity it will hold; None when only a pull can tell)."""
    plans: dict[str, Plan] = {}
    for host, refs in truths.items():
        if host not in have:
            continue
        changes: list[Change] = []
        fine: list[str] = []
        blocked: list[str] = []
        fixes: list[str] = []
        expect = predicted.setdefault(host, {})
        for ref, t in refs.items():
            fact = have[host].get(ref)
            iid = fact.key if fact else None
            if fact is not None and not iid and fact.error and fact.error != "not present":
                blocked.append(f"docker did not answer for {ref}: {fact.error}")
                fixes.append(f"start the Docker engine on {host}: `systemctl start docker`")
                continue
            facts = {h: have[h].get(ref) or ImageFact(ref, None) for h in truths if ref in truths[h] and h in have}
            holders = {h: f.key for h, f in facts.items()}
            want = t.image_id
            if want is None and t.origin == "registry" and t.manifest:
                # the registry named a manifest no node holds and this machine could not read:
                # every node of the platform pulls it; the image it is, the pull tells
                expect[ref] = unknown_until_pulled(t.manifest)
                state = "missing" if not iid else f"holds {short(iid)}"
                data = {"image": ref, "want": None, "manifest": t.manifest, "source": None, "source_id": None, "pull": t.pull}
                changes.append(Change("pull", f"pull {t.pull} ({state}; {t.detail})", data))
                continue
            if want is None:
                ids = set(holders.values())
                if iid and len(ids) == 1:
                    expect[ref] = iid
                    fine.append(f"{ref} {short(iid)} on every node, not verified ({t.detail})")
                    continue
                state = "missing" if not iid else f"holds {short(iid)}"
                seen = ", ".join(f"{h} {short(i)}" for h, i in holders.items())
                blocked.append(f"{ref} {state} here and nothing to verify it against ({t.detail}); nodes hold: {seen}")
                node = asked_on(inv, ref)
                fixes.append(
                    f"make the registry answer {node}'s dockerd (`docker pull {ref}` on {node}; `docker login` "
                    "there for a private registry) or pin runtime.image_digest; an image on no registry (built "
                    f"or loaded by hand): load the same one on every node yourself (`docker save {ref} | ssh NODE "
                    "docker load`), which up then takes as it is; then rerun `sparkctl up`: an unverified image "
                    "is never copied"
                )
                continue
            expect[ref] = want
            sources = [h for h, f in facts.items() if h != host and f.holds(want)]
            sources.sort(key=lambda h: (-_rail_speed(inv, host, h), inv.hosts[h].role != "head", list(inv.hosts).index(h)))
            source = sources[0] if sources else None
            current = fact is not None and fact.holds(want)
            if current and not (force_pull and t.origin == "registry"):
                where = "already current in the registry" if t.origin == "registry" else "as last verified"
                fine.append(f"{ref} {short(want)} {where} ({t.detail})")
                continue
            state = "missing" if not iid else f"drift: holds {short(iid)}, should hold {short(want)}"
            data = {
                "image": ref,
                "want": want,
                "manifest": t.manifest,
                "source": source,
                "source_id": facts[source].id if source else None,
                "pull": t.pull,
            }
            if t.origin == "registry":
                if side_load and source and not current:
                    changes.append(Change("copy", f"copy {short(want)} from {source} ({state}; {t.detail})", data))
                    continue
                fallback = f"; if the pull fails, copy from {source}" if source else ""
                why = "--pull" if current else state
                changes.append(Change("pull", f"pull {t.pull} ({why}; {t.detail}){fallback}", data))
                continue
            # the registry did not answer: fill a missing image from a verified node; never overwrite a drift
            if source and (not iid or side_load):
                changes.append(Change("copy", f"copy {short(want)} from {source} ({state}; {t.detail})", data))
                continue
            if not iid:
                blocked.append(f"{ref} missing and no node holds the last good image {short(want)} ({t.detail})")
                fixes.append(
                    f"bring the registry back and rerun `sparkctl up` (every node pulls {ref}); or load the "
                    f"image {short(want)} on one node by hand"
                )
                continue
            blocked.append(f"{ref} {state} ({t.detail})")
            fix = f"bring the registry back and rerun `sparkctl up` ({host} pulls {ref})"
            if source:
                fix += f"; or `sparkctl up --side-load` to copy it from {source}"
            fixes.append(fix)
        if blocked:  # the runner prints `blocked` as the failure: it carries the fix
            why, fix = "; ".join(blocked), "; ".join(dict.fromkeys(fixes))
            plans[host] = Plan(name, host, tuple(changes), why, blocked=f"{host}: {why}. Fix: {fix}")
        elif changes:
            plans[host] = Plan(name, host, tuple(changes), "; ".join(c.summary for c in changes))
        else:
            plans[host] = Plan(name, host, (), "; ".join(fine))
    return plans


class ImagesStep(Step):
    name = "images"
    facts = frozenset({"image", "applied"})

    def __init__(self, resolver: Optional[Callable[..., Any]] = None, ask: Optional[Ask] = None) -> None:
        """`resolver`: this machine's registry lookup (transport/registry.resolve); `ask`: a node's
        dockerd's (ask_node); tests pass recorded ones."""
        self._lock = threading.Lock()
        self._fresh: Optional[dict[str, dict[str, Optional[ImageFact]]]] = None
        self._resolver = resolver
        self._ask = ask
        self._answers: Optional[dict[tuple[str, str], Any]] = None  # from prepare, when the runner ran it
        self._looked_up: dict[tuple[str, str], Optional[str]] = {}  # (name@digest, platform) -> identity, once per run
        self.truths: dict[str, dict[str, Truth]] = {}

    def hosts(self, inv: Inventory) -> list[str]:
        return list(images_by_host(inv))

    def prepare(self, ctx: RunContext) -> None:
        self._answers = registry_answers(ctx, self._resolver, self._ask)  # an InputError stops the run (runner)

    def _lookup(self, image: str, platform: str) -> Optional[str]:
        """The identity of `image` (name@digest) read from the registry by this machine, None when it
        cannot (offline, no credentials): asked only for a manifest no node holds."""
        from sparkctl.transport import registry

        if (image, platform) not in self._looked_up:
            try:
                got = (self._resolver or registry.resolve)(image, platform=platform, insecure=True)
                self._looked_up[(image, platform)] = got.identity or None
            except SparkctlError:
                self._looked_up[(image, platform)] = None
        return self._looked_up[(image, platform)]

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        answers = self._answers if self._answers is not None else registry_answers(ctx, self._resolver, self._ask)
        self.truths = {h: t for h, t in resolve_truths(ctx, answers, self._lookup).items() if h in ctx.facts}
        have = {h: ctx.facts[h].images for h in self.truths}
        # the command's flags, or the playbook entry's options
        side_load = ctx.options.side_load or self.options.side_load
        pull = ctx.options.pull or self.options.pull
        return plan_images(ctx.inventory, have, self.truths, side_load, pull, ctx.outputs.image_ids, self.name)

    def apply(self, ctx: RunContext, plan: Plan) -> tuple[str, bool]:
        """Exactly the planned operations. Returns (summary, whether any image on this host changed)."""
        done, changed = [], False
        before = {ref: (f.id if f else None) for ref, f in ctx.facts[plan.host].images.items()}  # docker IDs
        for c in plan.changes:
            ref, want = c.data["image"], c.data["want"]
            if c.action == "pull":
                try:
                    now = self._pull(ctx, plan.host, c.data["pull"], ref)
                except HostError as exc:
                    if not c.data.get("source"):
                        raise
                    done.append(f"pull failed ({exc.message[:100]}), copying from {c.data['source']} as planned")
                    done.append(self._copy(ctx, plan.host, c.data["source"], c.data["source_id"], ref))
                    changed = True
                    continue
                manifest = c.data.get("manifest")
                if not (now.holds(want) if want else now.pulled_as(manifest)):
                    named = short(want) if want else f"manifest {short(manifest)}"
                    raise HostError(
                        f"{plan.host}: pulled {c.data['pull']} and got {short(now.key)}, but the registry named "
                        f"{named} a moment ago (the tag moved during this run?)",
                        fix="rerun `sparkctl up`; pin runtime.image_digest to stop the tag moving under a run",
                    )
                if now.id == before.get(ref):
                    done.append(f"{ref} already current in the registry ({short(now.key)})")
                else:
                    done.append(f"pulled {c.data['pull']} ({short(now.key)})")
                    changed = True
            elif c.action == "copy":
                done.append(self._copy(ctx, plan.host, c.data["source"], c.data["source_id"], ref))
                changed = True
        return "; ".join(done), changed

    def _copy(self, ctx: RunContext, host: str, source: str, image_id: str, ref: str) -> str:
        """Side-load: `image_id` is the source's own docker ID for the image (its store's)."""
        from sparkctl.launch.endpoints import fabric_link_to
        from sparkctl.transport.images import copy_image

        link = fabric_link_to(ctx.inventory, host, source)
        address = str(link.address.ip) if link is not None else None
        t = copy_image(
            ctx.session(source),
            ctx.session(host),
            image_id,
            ref,
            fabric_address=address,
            progress=lambda p: ctx.progress(host, self.name, f"side-load {short(image_id)} from {source}: {p}"),
        )
        if t.path == "none":
            return f"side-load of {ref} from {source} not needed: {host} still held {short(image_id)} (untagged), tagged it"
        if t.path == "fabric" and link is not None:
            how = f"straight over the fabric ({link.device})"
        elif address:
            how = f"relayed through this machine ({source} cannot SSH to {host}'s fabric address {address}: {t.why})"
        else:
            how = "relayed through this machine (no rail between them)"
        held = f", {t.layers_skipped} layer(s) already there" if t.layers_skipped else ""
        return (
            f"side-loaded {ref} from {source} {how}: {t.layers_sent} layer(s), {t.bytes_sent / 1e6:.0f} MB in "
            f"{t.seconds:.1f} s ({t.rate / 1e6:.0f} MB/s){held}"
        )

    def _pull(self, ctx: RunContext, host: str, pull: str, ref: str) -> ImageFact:
        """Pull with byte progress (by digest when pinned, then tagged as `ref`), with the node's own
        `docker login` when it has one for the registry; returns the image under `ref`."""
        import docker

        from sparkctl.transport.docker import registry_auth
        from sparkctl.transport.registry import Reference

        session = ctx.session(host)
        client = session.docker()
        auth = registry_auth(session, Reference.parse(ref).registry)
        digest = pull.partition("@")[2]
        # repository and tag from `ref`: a pinned pull names the digest only, and the tag it gets is ref's
        repo, _, tag = ref.rpartition(":") if ":" in ref.rsplit("/", 1)[-1] else (ref, "", "latest")
        layers: dict[str, tuple[int, int]] = {}
        try:
            for ev in client.api.pull(repo, tag=digest or tag, stream=True, decode=True, auth_config=auth):
                if "error" in ev:
                    raise HostError(f"{host}: pull {pull} failed: {ev['error']}")
                d = ev.get("progressDetail") or {}
                if ev.get("id") and d.get("total"):
                    layers[ev["id"]] = (d.get("current", 0), d["total"])
                    cur = sum(c for c, _ in layers.values())
                    tot = sum(t for _, t in layers.values())
                    ctx.progress(host, self.name, f"pull {pull}: {cur / 1e6:.0f}/{tot / 1e6:.0f} MB")
            if digest:
                got = client.api.inspect_image(pull)["Id"]
                client.api.tag(got, repo, tag, force=True)
            return fact_of_inspect(ref, client.api.inspect_image(ref))
        except docker.errors.APIError as exc:
            raise HostError(f"{host}: pull {pull} failed: {exc.explanation or exc}") from None

    def _ids_now(self, ctx: RunContext, changed: bool) -> dict[str, dict[str, Optional[ImageFact]]]:
        """The images on every node: as gathered, or read again (once per run, all nodes at once)
        when this step changed anything."""
        with self._lock:
            if self._fresh is None:
                hosts = [h for h in images_by_host(ctx.inventory) if h in ctx.facts]
                if changed:
                    ctx.sessions.map(lambda s: ctx.refresh(s.name, {"image"}), hosts=hosts)
                self._fresh = {h: dict(ctx.facts[h].images) for h in hosts}
            return self._fresh

    def verify(self, ctx: RunContext, host: str, changed: bool) -> str:
        have = self._ids_now(ctx, changed).get(host, {})
        wrong, proofs = [], []
        for ref, t in self.truths.get(host, {}).items():
            want = t.image_id or ctx.outputs.image_ids.get(host, {}).get(ref)
            fact = have.get(ref)
            if t.image_id is None and t.origin == "registry" and t.manifest:  # pulled: docker recorded the manifest
                if fact is None or not fact.pulled_as(t.manifest):
                    wrong.append(f"{ref} holds {short(fact.key if fact else None)}, not pulled as manifest {short(t.manifest)}")
                else:
                    proofs.append(f"image {short(fact.key)} pulled as the registry's manifest {short(t.manifest)}")
                continue
            if fact is None or not fact.holds(want):
                wrong.append(f"{ref} holds {short(fact.key if fact else None)}, should hold {short(want)}")
            else:
                basis = {"registry": "the registry's", "record": "the last good record's"}.get(t.origin)
                proofs.append(
                    f"image matches {basis} ({short(want)})" if basis else f"image {short(want)} on every node (not verified)"
                )
        if wrong:
            raise HostError(
                f"{host}: " + "; ".join(wrong),
                fix="rerun `sparkctl up`; `sparkctl doctor --only images` names every node that differs",
            )
        # the record keeps identities: the same under either image store (an old record's ID is replaced)
        ctx.outputs.image_ids[host] = {ref: image.key if (image := have.get(ref)) else None for ref in self.truths.get(host, {})}
        return ", ".join(proofs)
