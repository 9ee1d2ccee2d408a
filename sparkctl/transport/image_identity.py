"""An image's identity and its store, from docker's own answers (`docker image inspect`, `docker
info`) and the registry's config blob: what the image copy (transport/images.py, registry.py), the
docker and disk facts and the images step compare.

Two image stores answer `docker image inspect` differently (moby daemon/images/image_inspect.go
and daemon/containerd/image_inspect.go):
- the classic (graphdriver) store: `Id` is the config digest; `RepoDigests` the manifest digest
  it was pulled by (none once side-loaded);
- containerd's store (Docker 29's default on fresh installs): `Id` is the target digest, the image
  index or manifest it was pulled or loaded as, also shown in `Descriptor`; a container's `Image`
  is that same target digest.
Both give the config's layer diff IDs (`RootFS.Layers`), platform and run config. So an image's
identity is `image_identity`: a digest of exactly those, which the registry's config blob gives as
well.
"""

from __future__ import annotations

import hashlib
import json
from typing import Optional

IDENTITY_PREFIX = "content:"  # never a docker ID: docker commands take ImageFact.id
# The run config that decides what a container of the image runs (ocispec ImageConfig field names,
# as both stores' inspect and the config blob spell them); metadata (Created, history) is left out.
RUN_CONFIG = ("User", "Env", "Entrypoint", "Cmd", "WorkingDir", "Labels")


def image_identity(diff_ids: list[str], os: str, architecture: str, variant: str, config: Optional[dict]) -> str:
    """What both image stores (and the registry's config blob) agree on for one image: the layers'
    diff IDs, the platform and the run config. Empty values count as absent (one store writes
    `"Entrypoint": null`, the other leaves it out)."""
    run = {k: (config or {}).get(k) for k in RUN_CONFIG}
    doc = {
        "diff_ids": list(diff_ids),
        "platform": [os or "", architecture or "", variant or ""],
        "config": {k: v for k, v in run.items() if v},
    }
    text = json.dumps(doc, sort_keys=True, separators=(",", ":"))
    return IDENTITY_PREFIX + "sha256:" + hashlib.sha256(text.encode()).hexdigest()


def identity_of_inspect(doc: dict) -> str:
    """`image_identity` of one `docker image inspect` document (either store)."""
    return image_identity(
        (doc.get("RootFS") or {}).get("Layers") or [],
        doc.get("Os", ""),
        doc.get("Architecture", ""),
        doc.get("Variant", ""),
        doc.get("Config"),
    )


def identity_of_config(blob: dict) -> str:
    """`image_identity` of an image config blob (what a registry's manifest names)."""
    return image_identity(
        (blob.get("rootfs") or {}).get("diff_ids") or [],
        blob.get("os", ""),
        blob.get("architecture", ""),
        blob.get("variant", ""),
        blob.get("config"),
    )


# containerd snapshotter names: containerd's store reports its snapshotter as GraphDriver.Name
# (API < 1.52); the classic store's graph drivers are overlay2, vfs, devicemapper, ...
SNAPSHOTTERS = frozenset({"overlayfs", "native", "stargz", "nydus", "erofs"})


def store_of_inspect(doc: dict) -> str:
    """ "containerd" when the image is held by containerd's store (it reports the target `Descriptor`,
    API >= 1.48, whose digest is its `Id`; older engines show the snapshotter as the graph
    driver), else "classic"."""
    desc = doc.get("Descriptor") or {}
    if desc.get("digest") and desc.get("digest") == doc.get("Id"):
        return "containerd"
    return "containerd" if (doc.get("GraphDriver") or {}).get("Name") in SNAPSHOTTERS else "classic"


# Where images live (moby daemon/command/daemon.go, daemon/containerd/service.go): the classic store
# keeps them under docker's data root; containerd's store (DriverStatus names the snapshotter
# plugin type) in containerd's root: the system containerd's (`root` in /etc/containerd/config.toml,
# default /var/lib/containerd) when dockerd found its socket, else the one dockerd supervises,
# under <data root>/containerd/daemon.
SNAPSHOTTER_STATUS = ["driver-type", "io.containerd.snapshotter.v1"]
SYSTEM_CONTAINERD_SOCKET = "/run/containerd/containerd.sock"


def images_root(info: dict, docker_root: str, containerd_root: Optional[str]) -> tuple[str, str]:
    """(image store, the directory its images are in) from `docker info`."""
    status = [list(p) for p in info.get("DriverStatus") or []]
    if SNAPSHOTTER_STATUS not in status:
        return "classic", docker_root
    address = (info.get("Containerd") or {}).get("Address") or SYSTEM_CONTAINERD_SOCKET  # API >= 1.46 says
    if address == SYSTEM_CONTAINERD_SOCKET and containerd_root:
        return "containerd", containerd_root
    return "containerd", f"{docker_root.rstrip('/')}/containerd/daemon"


def short(image: Optional[str]) -> str:
    """12 hex digits of a docker ID or an identity, for messages."""
    return (image or "nothing").rsplit(":", 1)[-1][:12]
