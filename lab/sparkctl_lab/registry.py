"""The lab registry: Debian's `docker-registry` on the runner's management address.

Bound to 10.231.0.1:5000, not loopback: each lab host has its own loopback, so only the
management address is reachable from all of them. Plain HTTP; every host's daemon.json
lists it under insecure-registries.
"""

from __future__ import annotations

import http.client
import json

from sparkctl_lab import paths
from sparkctl_lab import topology as topo

MANIFEST_TYPES = ", ".join([
    "application/vnd.docker.distribution.manifest.v2+json",
    "application/vnd.docker.distribution.manifest.list.v2+json",
    "application/vnd.oci.image.manifest.v1+json",
    "application/vnd.oci.image.index.v1+json",
])


def config_yaml() -> str:
    return f"""\
version: 0.1
log:
  level: warn
  accesslog:
    disabled: true
storage:
  filesystem:
    rootdirectory: {paths.REGISTRY_DIR / 'storage'}
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


def request(method: str, path: str, headers: dict | None = None, timeout: float = 3) -> tuple[int, dict, bytes]:
    c = http.client.HTTPConnection(topo.RUNNER_ADDRESS, topo.REGISTRY_PORT, timeout=timeout)
    try:
        c.request(method, path, headers=headers or {})
        r = c.getresponse()
        return r.status, dict(r.getheaders()), r.read()
    finally:
        c.close()


def healthy() -> bool:
    try:
        return request("GET", "/v2/", timeout=1)[0] == 200
    except OSError:
        return False


def manifest(repo: str = topo.IMAGE_REPO, tag: str = topo.IMAGE_TAG) -> dict | None:
    """The image's manifest (with its digest under `_digest`), or None when absent."""
    try:
        status, headers, body = request("GET", f"/v2/{repo}/manifests/{tag}", {"Accept": MANIFEST_TYPES})
    except OSError:
        return None
    if status != 200:
        return None
    doc = json.loads(body)
    doc["_digest"] = {k.lower(): v for k, v in headers.items()}.get("docker-content-digest")
    return doc


def image_config(repo: str = topo.IMAGE_REPO, tag: str = topo.IMAGE_TAG) -> dict | None:
    """The image's config blob (labels, env, cmd): the image ID is its digest."""
    m = manifest(repo, tag)
    if not m or "config" not in m:
        return None
    status, _, body = request("GET", f"/v2/{repo}/blobs/{m['config']['digest']}")
    if status != 200:
        return None
    doc = json.loads(body)
    doc["_id"] = m["config"]["digest"]
    doc["_manifest_digest"] = m.get("_digest")
    return doc
