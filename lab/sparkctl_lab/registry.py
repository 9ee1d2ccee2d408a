"""The lab registry: Debian's `docker-registry` on the runner's management address.

Bound to 10.231.0.1:5000, not loopback: each lab host has its own loopback, so only the
management address is reachable from all of them. Plain HTTP; every host's daemon.json
lists it under insecure-registries.
"""

from __future__ import annotations

import httpx

from sparkctl import httpclient
from sparkctl_lab import paths
from sparkctl_lab import topology as topo

MANIFEST_TYPES = ", ".join(
    [
        "application/vnd.docker.distribution.manifest.v2+json",
        "application/vnd.docker.distribution.manifest.list.v2+json",
        "application/vnd.oci.image.manifest.v1+json",
        "application/vnd.oci.image.index.v1+json",
    ]
)


def config_yaml() -> str:
    return f"""\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {paths.REGISTRY_DIR / "storage"}
  delete:
    enabled: true
  maintenance:
    uploadpurging:
      enabled: false
http:
  addr: {topo.REGISTRY}
  headers:
    X-Content-Type-Options: [nosniff]
"""


def _get(path: str, headers: dict | None = None, timeout: float = 3) -> httpx.Response:
    return httpclient.get(f"http://{topo.REGISTRY}{path}", headers=headers, timeout=timeout, trust_env=False)


def healthy() -> bool:
    try:
        return _get("/v2/", timeout=1).status_code == 200
    except httpx.HTTPError:
        return False


def manifest(repo: str = topo.IMAGE_REPO, tag: str = topo.IMAGE_TAG) -> dict | None:
    """The image's manifest (with its digest under `_digest`), or None when absent."""
    try:
        r = _get(f"/v2/{repo}/manifests/{tag}", {"Accept": MANIFEST_TYPES})
    except httpx.HTTPError:
        return None
    if r.status_code != 200:
        return None
    return {**r.json(), "_digest": r.headers.get("docker-content-digest")}


def image_config(repo: str = topo.IMAGE_REPO, tag: str = topo.IMAGE_TAG) -> dict | None:
    """The image's config blob (labels, env, cmd): the image ID is its digest."""
    m = manifest(repo, tag)
    if not m or "config" not in m:
        return None
    r = _get(f"/v2/{repo}/blobs/{m['config']['digest']}")
    if r.status_code != 200:
        return None
    return {**r.json(), "_id": m["config"]["digest"], "_manifest_digest": m["_digest"]}
