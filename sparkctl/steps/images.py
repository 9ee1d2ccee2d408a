"""Images step: the runtime (and drafter) image on every node, the same image ID everywhere.

Pulled in parallel from the registry before anything is stopped, so a restart never waits for a
download. Where a node cannot pull (or with --side-load) the image is streamed from a node that
has it over SSH (`docker save | docker load`, relayed through this machine) and its ID verified.
Identity is the image ID (config digest), not RepoDigests: a side-loaded image has none.
"""

from __future__ import annotations

import shlex
import threading
from typing import Optional

from sparkctl.errors import HostError
from sparkctl.inventory.models import Inventory
from sparkctl.runtime.launch import render
from sparkctl.steps.base import Change, Plan, RunContext, Step

CHUNK = 1 << 20
WINDOW = 8 << 20  # SSH channel window: 8 MiB measured best on the lab relay (2: 57, 8: 56, 64: 20-46 MB/s)
PACKET = 32768


def images_by_host(inv: Inventory) -> dict[str, list[str]]:
    out: dict[str, list[str]] = {}
    for c in render(inv).containers:
        if c.image not in out.setdefault(c.host, []):
            out[c.host].append(c.image)
    return out


def ids_of(ctx: RunContext, host: str) -> dict[str, Optional[str]]:
    """Image reference -> ID the host holds under it (None: absent), from the `image` fact."""
    return {ref: fact.id for ref, fact in ctx.facts[host].images.items()}


def reference_ids(inv: Inventory, have: dict[str, dict[str, Optional[str]]]) -> dict[str, str]:
    """Per image, the ID the cluster should converge on: the head's, else the first node's that has it."""
    order = inv.hosts_with_role("head") + [h for h in inv.hosts if inv.hosts[h].role != "head"]
    ref: dict[str, str] = {}
    for h in order:
        for image, iid in have.get(h, {}).items():
            if iid and image not in ref:
                ref[image] = iid
    return ref


def stream_image(src, dst, image: str, progress=lambda n: None) -> int:
    """`docker save` on src piped into `docker load` on dst through this machine; returns bytes moved.

    Reading and writing overlap (a reader thread feeds a bounded queue) and both channels get
    large SSH windows, so the relay runs near the speed of a plain SSH stream.
    """
    import queue

    out_chan = src.paramiko_client.get_transport().open_session(window_size=WINDOW, max_packet_size=PACKET)
    in_chan = dst.paramiko_client.get_transport().open_session(window_size=WINDOW, max_packet_size=PACKET)
    out_chan.exec_command(f"docker save {shlex.quote(image)}")
    in_chan.exec_command("docker load")
    chunks: "queue.Queue[bytes | None]" = queue.Queue(maxsize=64)

    def reader() -> None:
        try:
            while True:
                data = out_chan.recv(CHUNK)
                if not data:
                    break
                chunks.put(data)
        finally:
            chunks.put(None)

    t = threading.Thread(target=reader, name="sparkctl-side-load", daemon=True)
    t.start()
    total = 0
    while (data := chunks.get()) is not None:
        in_chan.sendall(data)
        total += len(data)
        progress(total)
    t.join()
    in_chan.shutdown_write()
    save_rc = out_chan.recv_exit_status()
    load_rc = in_chan.recv_exit_status()
    err = in_chan.recv_stderr(4096).decode(errors="replace") + out_chan.recv_stderr(4096).decode(errors="replace")
    if save_rc or load_rc:
        raise HostError(f"side-load of {image} {src.name}->{dst.name} failed (save {save_rc}, load {load_rc}): {err.strip()}")
    return total


def direct_command(image: str, dst_ip: str) -> str:
    """Run on the source node: stream the image straight to the destination over the fabric with
    the node's own OpenSSH and known_hosts (never auto-adding a key)."""
    ssh = f"ssh -o BatchMode=yes -o StrictHostKeyChecking=yes -o ConnectTimeout=5 {shlex.quote(dst_ip)}"
    return f"{ssh} true && docker save {shlex.quote(image)} | {ssh} docker load"


def side_load(ctx: RunContext, source: str, host: str, image: str, progress=lambda text: None) -> str:
    """Copy `image` from `source` to `host`: straight over the fabric when the source node can SSH
    to the destination's fabric address (as multi-node Spark setups allow), else relayed through
    this machine over the two SSH connections sparkctl already holds. Returns how it went."""
    from sparkctl.runtime.launch import fabric_link_to

    link = fabric_link_to(ctx.inventory, host, source)
    if link is not None:
        progress(f"side-load {image}: {source} -> {host} over the fabric ({link.address.ip})")
        r = ctx.fleet[source].run(["bash", "-o", "pipefail", "-c", direct_command(image, str(link.address.ip))])
        if r.ok:
            return f"side-loaded {image} from {source} straight over the fabric ({link.device})"
        if r.exit_code != 255:  # ssh worked, save or load failed: a real error, not a missing trust
            raise HostError(f"side-load {source}->{host} over the fabric failed: {(r.stderr or r.stdout).strip()[-300:]}")
    moved = stream_image(
        ctx.fleet[source], ctx.fleet[host], image,
        lambda n: progress(f"side-load {image} from {source} via this machine: {n / 1e6:.0f} MB"),
    )  # fmt: skip
    why = "" if link is None else f" ({source} cannot SSH to {host}'s fabric address)"
    return f"side-loaded {image} from {source} relayed through this machine, {moved / 1e6:.0f} MB{why}"


class ImagesStep(Step):
    name = "images"
    description = "runtime/drafter image present on every node with the same image ID"
    facts = frozenset({"image"})

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._fresh: Optional[dict[str, dict[str, Optional[str]]]] = None

    def hosts(self, inv: Inventory) -> list[str]:
        return list(images_by_host(inv))

    def plan(self, ctx: RunContext) -> dict[str, Plan]:
        """Nothing to do when every node has the image with one ID. Otherwise the registry is the
        truth: every node pulls (a pull of an up-to-date image moves no layers), so a stale tag on
        one node is refreshed too; with --side-load the nodes lacking the head's ID copy it. A pull
        that may fall back to a side-load says so, and names the node it would copy from."""
        inv = ctx.inventory
        by_host = {h: refs for h, refs in images_by_host(inv).items() if h in ctx.facts}
        have = {h: ids_of(ctx, h) for h in by_host}
        ref = reference_ids(inv, have)
        side_load = bool(ctx.options.get("side_load"))
        force_pull = bool(ctx.options.get("pull"))
        plans = {}
        for host, images in by_host.items():
            changes, fine = [], []
            expect = ctx.outputs.image_ids.setdefault(host, {})
            for image in images:
                ids = {h: have[h].get(image) for h, imgs in by_host.items() if image in imgs}
                iid = ids[host]
                agree = all(ids.values()) and len(set(ids.values())) == 1
                source = next((h for h in inv.hosts if h != host and image in ref and have.get(h, {}).get(image) == ref[image]), None)
                if side_load and image in ref:
                    expect[image] = ref[image]
                    if iid == ref[image]:
                        fine.append(f"{image} present ({iid[7:19]})")
                        continue
                    why = "missing" if not iid else f"ID {iid[7:19]} differs from the cluster's {ref[image][7:19]}"
                    changes.append(Change("side-load", f"side-load {image} from {source} ({why})", {"image": image, "source": source}))
                    continue
                if agree and not force_pull:
                    expect[image] = iid
                    fine.append(f"{image} present ({iid[7:19]})")
                    continue
                # the registry decides the ID; known in advance only when every node that has it agrees
                holders = {i for i in ids.values() if i}
                expect[image] = next(iter(holders)) if len(holders) == 1 and not force_pull else None
                if force_pull:
                    why = "--pull"
                elif not iid:
                    why = "missing"
                else:
                    missing = [h for h, i in ids.items() if not i]
                    why = f"nodes hold {len(holders)} different IDs" if len(holders) > 1 else f"missing on {', '.join(missing)}"
                    why += ": refresh from the registry"
                fallback = f"; if the registry fails, side-load from {source}" if source and not iid else ""
                changes.append(Change("pull", f"pull {image} ({why}){fallback}", {"image": image, "fallback": source if fallback else None}))
            plans[host] = self.changes(host, changes) if changes else self.noop(host, "; ".join(fine))
        return plans

    def apply(self, ctx: RunContext, plan: Plan) -> tuple[str, bool]:
        """Exactly the planned operations. Returns (summary, whether any image ID on this host changed)."""
        done, changed = [], False
        before = ids_of(ctx, plan.host)
        for c in plan.changes:
            image = c.data["image"]
            if c.action == "pull":
                try:
                    now = self._pull(ctx, plan.host, image)
                except HostError as exc:
                    if not c.data.get("fallback"):
                        raise
                    done.append(f"pull failed ({exc.message[:80]}), side-loading from {c.data['fallback']} as planned")
                    done.append(side_load(ctx, c.data["fallback"], plan.host, image, lambda t: ctx.progress(plan.host, self.name, t)))
                    changed = True
                    continue
                if now == before.get(image):
                    done.append(f"{image} already current in the registry ({now[7:19]})")
                else:
                    done.append(f"pulled {image} ({now[7:19]})")
                    changed = True
            elif c.action == "side-load":
                if not c.data.get("source"):
                    raise HostError(f"{plan.host}: no node has {image} to side-load from",
                                    fix="load the image on one node (or check the registry), then rerun `sparkctl up`")
                done.append(side_load(ctx, c.data["source"], plan.host, image, lambda t: ctx.progress(plan.host, self.name, t)))
                changed = True
        return "; ".join(done), changed

    def _pull(self, ctx: RunContext, host: str, image: str) -> str:
        """Pull with byte progress; returns the image ID now on the host."""
        import docker

        client = ctx.fleet[host].docker()
        repo, _, tag = image.rpartition(":") if ":" in image.rsplit("/", 1)[-1] else (image, "", "latest")
        layers: dict[str, tuple[int, int]] = {}
        try:
            for ev in client.api.pull(repo, tag=tag, stream=True, decode=True):
                if "error" in ev:
                    raise HostError(f"{host}: pull {image} failed: {ev['error']}")
                d = ev.get("progressDetail") or {}
                if ev.get("id") and d.get("total"):
                    layers[ev["id"]] = (d.get("current", 0), d["total"])
                    cur = sum(c for c, _ in layers.values())
                    tot = sum(t for _, t in layers.values())
                    ctx.progress(host, self.name, f"pull {image}: {cur / 1e6:.0f}/{tot / 1e6:.0f} MB")
            return client.images.get(image).id
        except docker.errors.APIError as exc:
            raise HostError(f"{host}: pull {image} failed: {exc.explanation or exc}") from None

    def _ids_now(self, ctx: RunContext, changed: bool) -> dict[str, dict[str, Optional[str]]]:
        """Image IDs on every node: as gathered, or read again (once per run, all nodes at once)
        when this step changed anything."""
        with self._lock:
            if self._fresh is None:
                hosts = list(images_by_host(ctx.inventory))
                if changed:
                    ctx.fleet.map(lambda s: ctx.refresh(s.name, {"image"}), hosts=hosts)
                self._fresh = {h: ids_of(ctx, h) for h in hosts if h in ctx.facts}
            return self._fresh

    def verify(self, ctx: RunContext, host: str, changed: bool) -> str:
        wanted = images_by_host(ctx.inventory)[host]
        fresh = self._ids_now(ctx, changed)
        have = fresh.get(host, {})
        head = ctx.inventory.hosts_with_role("head")[0]
        ref = fresh.get(head, {})
        bad = [i for i in wanted if not have.get(i) or (ref.get(i) and have[i] != ref[i])]
        if bad:
            raise HostError(
                f"{host}: image missing or ID differs from {head}'s: "
                + ", ".join(f"{i} has {(have.get(i) or 'nothing')[7:19]}, {head} has {(ref.get(i) or '?')[7:19]}" for i in bad),
                fix="run `sparkctl up --side-load` to copy the head's image to this node",
            )
        ctx.outputs.image_ids[host] = {i: have[i] for i in wanted}
        return "image ID matches on every node: " + ", ".join(f"{have[i][7:19]}" for i in wanted)
