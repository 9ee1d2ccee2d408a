"""Docker facts from the docker CLI on the host: images and this cluster's runtime containers.

Doctor reads these inside its one round trip per host (the Docker SDK over SSH needs the same
CLI on the host anyway: it dials the engine with `docker system dial-stdio`).

An image's identity across docker's two image stores (what `images.same`, provenance, the
side-load and applied.json compare) is transport/image_identity.py's; the store-local `Id` is kept
for what docker commands on that node take (tag, save, run).
"""

from __future__ import annotations

import json
import shlex
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Optional

from sparkctl.facts.base import Reading, Target, fact, host_fields
from sparkctl.launch.names import LABEL_PREFIX
from sparkctl.transport.image_identity import identity_of_inspect, store_of_inspect

if TYPE_CHECKING:
    from sparkctl.facts.host import HostFacts


def image_probe(ref: str) -> str:
    return f"docker image inspect {shlex.quote(ref)}"


@dataclass(frozen=True)
class ImageFact:
    ref: str
    id: Optional[str]  # the store-local docker ID (sha256:...), what docker commands on this node take; None when absent
    error: Optional[str] = None  # why there is no id ("not present", docker not answering)
    identity: Optional[str] = None  # image_identity: what nodes, the registry and applied.json compare
    store: str = "classic"  # "classic" or "containerd"
    diff_ids: tuple[str, ...] = ()
    # manifest digests docker records this image was pulled as (RepoDigests; containerd's target):
    # what a registry's answer through a node's dockerd, a digest without the config, is matched by
    manifests: tuple[str, ...] = ()

    @property
    def key(self) -> Optional[str]:
        """What this image is compared by (its identity; the ID alone when only the ID was read)."""
        return self.identity or self.id

    def holds(self, image: Optional[str]) -> bool:
        """Whether this node's image is `image`: an identity, or a docker ID recorded before
        identities were (applied.json from an older sparkctl holds the node's own ID)."""
        return bool(image) and self.id is not None and image in (self.identity, self.id)

    def pulled_as(self, manifest: Optional[str]) -> bool:
        """Whether docker recorded pulling this image as `manifest` (the digest a tag named: an
        index's for a multi-platform tag). A side-loaded or hand-built image records none."""
        return bool(manifest) and self.id is not None and manifest in self.manifests


def manifests_of_inspect(doc: dict) -> tuple[str, ...]:
    """The manifest digests an inspect document records: RepoDigests' (`name@sha256:...`, both
    stores) and containerd's target descriptor."""
    found = [d.rpartition("@")[2] for d in doc.get("RepoDigests") or () if "@" in d]
    found.append((doc.get("Descriptor") or {}).get("digest") or "")
    return tuple(dict.fromkeys(d for d in found if d))


def fact_of_inspect(ref: str, doc: Any) -> ImageFact:
    """One `docker image inspect` document (the CLI's JSON or the Engine API's) -> ImageFact."""
    return ImageFact(
        ref,
        doc["Id"],
        identity=identity_of_inspect(doc),
        store=store_of_inspect(doc),
        diff_ids=tuple((doc.get("RootFS") or {}).get("Layers") or ()),
        manifests=manifests_of_inspect(doc),
    )


def parse_image(ref: str, rc: int, text: str) -> ImageFact:
    """`docker image inspect REF` (a JSON array) -> ImageFact. A bare `sha256:` line (the
    `--format '{{.Id}}'` probe of sparkctl before identities, kept in recorded samples) gives the ID
    alone."""
    body = text.strip()
    if rc == 0 and body.startswith("["):
        try:
            return fact_of_inspect(ref, json.loads(body)[0])
        except (ValueError, LookupError, TypeError, AttributeError):
            return ImageFact(ref, None, f"unreadable docker image inspect output: {body[:200]}")
    lines = [ln.strip() for ln in body.splitlines() if ln.strip()]
    if rc == 0 and lines and lines[0].startswith("sha256:"):
        return ImageFact(ref, lines[0])
    detail = lines[-1] if lines else f"docker exit {rc}"
    if "no such image" in text.lower() or (rc == 1 and not lines):
        detail = "not present"
    return ImageFact(ref, None, detail)


def cluster_ids(cluster: str) -> str:
    """Shell: `ids` = this cluster's containers, running or not (the probe exits when docker does not answer)."""
    label = shlex.quote(f"label={LABEL_PREFIX}.cluster={cluster}")
    return f"ids=$(docker ps -aq --no-trunc --filter {label}) || exit $?; "


def containers_probe(cluster: str) -> str:
    return cluster_ids(cluster) + 'if [ -n "$ids" ]; then docker inspect $ids; else echo "[]"; fi'


@dataclass(frozen=True)
class ContainerFact:
    id: str
    name: str
    status: str  # running, exited, restarting, created ...
    exit_code: int
    image_id: str
    image_ref: str
    labels: dict[str, str] = field(default_factory=dict)
    memlock: Optional[int] = None  # the container's memlock ulimit (soft), -1 = unlimited, None = not set
    started_at: str = ""
    error: str = ""  # State.Error, e.g. an OOM or exec failure
    oom_killed: bool = False  # State.OOMKilled: the kernel's OOM killer ended it

    @property
    def running(self) -> bool:
        return self.status == "running"

    def running_for(self) -> Optional[float]:
        """Seconds since it started (by this machine's clock), None if unreadable."""
        from datetime import datetime, timezone

        try:  # docker prints RFC 3339 in UTC with nanoseconds: fromisoformat keeps the microseconds
            return max((datetime.now(timezone.utc) - datetime.fromisoformat(self.started_at)).total_seconds(), 0.0)
        except (ValueError, TypeError):  # empty, or a time without its zone
            return None

    @property
    def role(self) -> str:
        return self.labels.get(f"{LABEL_PREFIX}.role", "")

    @property
    def config_hash(self) -> str:
        return self.labels.get(f"{LABEL_PREFIX}.config-hash", "")


def parse_containers(rc: int, text: str) -> tuple[list[ContainerFact], Optional[str]]:
    """`docker inspect` JSON -> containers (environment deliberately dropped: it may hold secrets)."""
    if rc != 0:
        return [], (text.strip().splitlines() or [f"docker exit {rc}"])[-1]
    try:
        items = json.loads(text or "[]")
    except json.JSONDecodeError:
        return [], f"unreadable docker inspect output: {text.strip()[:200]}"
    out = []
    for it in items:
        state = it.get("State") or {}
        cfg = it.get("Config") or {}
        ulimits = (it.get("HostConfig") or {}).get("Ulimits") or []
        memlock = next((int(u.get("Soft", 0)) for u in ulimits if u.get("Name") == "memlock"), None)
        out.append(
            ContainerFact(
                id=it.get("Id", ""),
                name=(it.get("Name") or "").lstrip("/"),
                status=state.get("Status", "unknown"),
                exit_code=int(state.get("ExitCode") or 0),
                image_id=it.get("Image", ""),
                image_ref=cfg.get("Image", ""),
                labels=dict(cfg.get("Labels") or {}),
                memlock=memlock,
                started_at=state.get("StartedAt", ""),
                error=state.get("Error", "") or "",
                oom_killed=bool(state.get("OOMKilled")),
            )
        )
    return out, None


def read_containers(client, cluster: str) -> Optional[list[ContainerFact]]:
    """The `containers` fact through a Docker SDK client a run already holds (transport/docker.py):
    the same list, inspected and parsed as the probe's, in a few HTTP requests on its open
    connection instead of an SSH command running the docker CLI twice. For polls (a start-up
    wait's looks at its peers). None when the engine did not answer, as the fact's None."""
    import docker as docker_sdk

    try:
        listed = client.api.containers(all=True, quiet=True, filters={"label": f"{LABEL_PREFIX}.cluster={cluster}"})
        docs = []
        for c in listed:
            try:
                docs.append(client.api.inspect_container(c["Id"]))
            except docker_sdk.errors.NotFound:  # removed since it was listed: gone, as a new list would say
                continue
    except docker_sdk.errors.DockerException:
        return None
    found, _ = parse_containers(0, json.dumps(docs))
    return found


def runs_image(container: ContainerFact, tagged: Optional[ImageFact], image: str) -> bool:
    """Whether `container` runs `image` (an identity). Its `Image` is a docker ID of its own node's
    store (the config digest, or containerd's target digest: moby daemon/create.go), so it runs
    the image the node holds under the reference exactly when the two IDs are equal."""
    return tagged is not None and tagged.holds(image) and container.image_id == tagged.id


@host_fields
class DockerFields:
    """The HostFacts attributes this module's facts fill (a host where one was not read keeps the default)."""

    images: dict[str, ImageFact] = field(default_factory=dict)  # reference -> ImageFact
    containers: Optional[list[ContainerFact]] = None  # this cluster's containers, None when docker did not answer


# --- the facts (facts/base.py) ---------------------------------------------------------------


def images_for(inv, host: str) -> list[str]:
    """Image references the host's runtime containers run (runtime and/or drafter image)."""
    from sparkctl.launch.plan import render

    try:
        plan = render(inv)
    except Exception:  # an inventory render cannot handle: images checks then report nothing
        return []
    return list(dict.fromkeys(spec.image for spec in plan.for_host(host)))


def host_images(t: Target) -> list[str]:
    """images_for the target's host, derived once per host (index i of its `image.i` sections)."""
    if "images" not in t.memo:
        t.memo["images"] = images_for(t.inventory, t.name)
    return t.memo["images"]


@fact("image", lambda t: {i: image_probe(ref) for i, ref in enumerate(host_images(t))}, background=True)  # reference -> ImageFact
def _image(f: HostFacts, r: Reading) -> None:
    ref = host_images(r.target)[r.index]
    f.images[ref] = parse_image(ref, r.rc, r.out)


@fact(
    "containers", lambda t: containers_probe(t.inventory.cluster.name), background=True
)  # this cluster's containers, None when docker did not answer
def _containers(f: HostFacts, r: Reading) -> None:
    found, err = parse_containers(r.rc, r.out)
    if err:
        f.errors[r.key] = err
    else:
        f.containers = found
