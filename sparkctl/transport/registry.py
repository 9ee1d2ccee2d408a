"""What a tag means in its registry right now, asked two ways:

- through a node's dockerd (`ask_dockerd`: the Engine API's GET /distribution/{name}/json,
  docker-py's `inspect_distribution`), from where the pull happens, with the node's network,
  mirrors, insecure-registries and `docker login` (sent by sparkctl as the docker CLI there would:
  transport/docker.py `registry_auth`). It gives the manifest digest the tag names (an index's for
  a multi-platform tag) and the platforms, not the config: the image's identity is then matched
  on the nodes by the digest docker recorded when it pulled (ImageFact.pulled_as);
- from this machine (`resolve`), the registry's HTTP API (distribution spec): GET
  /v2/<name>/manifests/<tag> with the manifest media types in Accept gives the manifest digest
  (Docker-Content-Digest); the manifest names its config blob, whose content gives the image
  identity (facts/docker.py: layers + run config). A multi-platform index is narrowed to the
  nodes' platform (DGX Spark: linux/arm64). Anonymous bearer tokens (the WWW-Authenticate
  challenge public registries send) are fetched; no credentials are sent from here.

`RegistryUnreachable` (no answer, TLS or HTTP failure) is kept apart from `TagNotFound` (the
registry answered: that tag is not there, or, `AccessDenied`, not to these credentials), so a
caller can fall back to the last good image ID only when the registry really could not be asked.
"""

from __future__ import annotations

import hashlib
import re
from contextlib import closing
from dataclasses import dataclass
from typing import Optional

import httpx

from sparkctl import httpclient
from sparkctl.errors import SparkctlError
from sparkctl.transport.guard import check_url

MANIFEST_V2 = "application/vnd.docker.distribution.manifest.v2+json"
MANIFEST_LIST = "application/vnd.docker.distribution.manifest.list.v2+json"
OCI_MANIFEST = "application/vnd.oci.image.manifest.v1+json"
OCI_INDEX = "application/vnd.oci.image.index.v1+json"
ACCEPT = ", ".join([MANIFEST_V2, MANIFEST_LIST, OCI_MANIFEST, OCI_INDEX])
INDEXES = (MANIFEST_LIST, OCI_INDEX)
DOCKER_HUB = "registry-1.docker.io"


class RegistryUnreachable(SparkctlError):
    """The registry could not be asked (connection, TLS, timeout, 5xx)."""


class TagNotFound(SparkctlError):
    """The registry answered: it has no such tag (or refuses it to an anonymous client)."""


class AccessDenied(TagNotFound):
    """The registry answered a node's dockerd: unauthorized or denied (a private image without
    the node's login, or, on Docker Hub, a repository that does not exist)."""


@dataclass(frozen=True)
class Reference:
    registry: str  # host[:port] as the nodes' dockerd spells it
    repository: str
    tag: str
    digest: Optional[str] = None  # a pin written into the reference (name@sha256:...)

    @property
    def api_host(self) -> str:
        return DOCKER_HUB if self.registry in ("docker.io", "index.docker.io") else self.registry

    @classmethod
    def parse(cls, ref: str) -> "Reference":
        """docker's own reading of a reference (docker.utils.parse_repository_tag and
        docker.auth.split_repo_name, written out: importing docker-py costs 0.1 s of a no-op
        `up`'s 1 s budget): the first path part names a registry when it has a dot, a port or is
        localhost; a last colon after the last slash starts the tag."""
        name, _, digest = ref.partition("@")
        repo, _, tag = name.rpartition(":") if ":" in name.rsplit("/", 1)[-1] else (name, "", "")
        first, _, rest = repo.partition("/")
        if rest and ("." in first or ":" in first or first == "localhost"):
            registry, repository = first, rest
        else:
            registry, repository = "docker.io", repo
        if registry == "index.docker.io":
            registry = "docker.io"
        if registry == "docker.io" and "/" not in repository:
            repository = f"library/{repository}"
        return cls(registry, repository, tag or "latest", digest or None)


@dataclass(frozen=True)
class Resolved:
    manifest_digest: str  # what `docker pull name@<digest>` takes
    image_id: str = ""  # config digest: the classic store's `docker image inspect` Id once pulled ("": a dockerd's answer)
    identity: str = ""  # image_identity.image_identity of the config blob: what every node's image must match ("": unknown)
    via: str = ""  # who asked, for messages: "head's dockerd", "this machine (...)"; "": this machine
    platforms: tuple[str, ...] = ()  # a dockerd's answer: os/arch[/variant] the tag's image(s) are for
    index: bool = False  # a dockerd's answer: the digest is a multi-platform index's


def check_fence(image: str) -> None:
    """The dev/CI fence (transport/guard.py) for the registry `image` lives on: asked through a
    node's dockerd or from here, it is sparkctl that has it contacted (FencedAddress)."""
    host = Reference.parse(image).api_host
    check_url(f"https://{host}/", f"the registry {host}")


def _platform(p: dict) -> str:
    return "/".join(x for x in (p.get("os"), p.get("architecture"), p.get("variant")) if x)


def from_distribution(doc: dict, via: str) -> Resolved:
    """A dockerd's answer to GET /distribution/{name}/json (moby api/server/router/distribution:
    the Descriptor of what the reference names and the platforms of its index's entries, or of a
    single image's config) -> Resolved without identity."""
    desc = doc.get("Descriptor") or {}
    digest = desc.get("digest")
    if not isinstance(digest, str) or not digest.startswith("sha256:"):
        raise RegistryUnreachable(f"{via} answered without a manifest digest: {str(doc)[:200]}")
    platforms = tuple(_platform(p) for p in doc.get("Platforms") or () if isinstance(p, dict))
    return Resolved(digest, via=via, platforms=platforms, index=desc.get("mediaType") in INDEXES)


def has_platform(answer: Resolved, platform: str) -> bool:
    """Whether an index answer lists `platform` (os/arch; a variant it names is ignored). One
    image (not an index) is taken as it is, as `resolve` takes it."""
    if not answer.index:
        return True
    return any(p == platform or p.startswith(platform + "/") for p in answer.platforms)


# words of a registry's refusal in dockerd's error text (distribution's errcode: UNAUTHORIZED, DENIED)
_REFUSED = ("unauthorized", "denied", "authentication required")
# ... and of a missing tag or repository (MANIFEST_UNKNOWN, NAME_UNKNOWN)
_MISSING = ("manifest unknown", "name unknown", "not found")


def ask_dockerd(client, image: str, via: str, auth: Optional[dict] = None) -> Resolved:
    """What `image` (tag, or name@digest) names now, asked through a node's dockerd (a docker-py
    client: transport/docker.py). `auth` is sent as X-Registry-Auth (None: docker-py's own
    choice). Raises TagNotFound, AccessDenied or RegistryUnreachable (the dockerd could not
    reach the registry, or did not answer within the client's deadline)."""
    import docker
    import requests

    ref = Reference.parse(image)
    name = f"{ref.registry}/{ref.repository}:{ref.tag}" + (f"@{ref.digest}" if ref.digest else "")
    try:
        doc = client.api.inspect_distribution(image, auth_config=auth)
    except docker.errors.APIError as exc:
        why = str(exc.explanation or exc).strip()
        low = why.lower()
        if exc.status_code in (401, 403) or any(w in low for w in _REFUSED):
            raise AccessDenied(
                f"{name}: the registry refused {via}: {why}",
                fix=f"`docker login {ref.registry}` on every node as the inventory's SSH user (a private "
                "image); or check runtime.image: Docker Hub refuses a repository that does not exist",
            ) from None
        if exc.status_code == 404 or any(w in low for w in _MISSING):
            raise TagNotFound(
                f"{name} is not in the registry ({via}: {why})",
                fix="check runtime.image in the inventory (name and tag), or push the image",
            ) from None
        raise RegistryUnreachable(f"{via} could not reach the registry {ref.registry}: {why}") from None
    except (requests.exceptions.RequestException, docker.errors.DockerException) as exc:
        raise RegistryUnreachable(f"{via} did not answer: {type(exc).__name__}: {exc}") from None
    return from_distribution(doc, via)


def _challenge(header: str) -> dict[str, str]:
    return dict(re.findall(r'(\w+)="([^"]*)"', header))


class RegistryClient:
    """One registry's HTTP API, plain httpx; `insecure` allows http:// after https:// fails
    (as dockerd does for the registries listed under insecure-registries)."""

    def __init__(
        self, registry: str, *, insecure: bool = False, timeout: float = 5.0, transport: Optional[httpx.BaseTransport] = None
    ):
        self.registry = registry
        self.schemes = ["https", "http"] if insecure else ["https"]
        # every request is fenced, redirects included (a registry sends blob GETs on to its storage)
        fence = {"request": [lambda req: check_url(str(req.url), f"the registry {registry} (or where it redirects)")]}
        # httpx's default verification, on the process's one TLS context (sparkctl/httpclient.py)
        self.http = httpclient.client(
            timeout=timeout, trust_env=False, transport=transport, follow_redirects=True, event_hooks=fence
        )
        self.base: Optional[str] = None
        self.token: Optional[str] = None

    def close(self) -> None:
        self.http.close()

    def get(self, path: str, repository: str) -> httpx.Response:
        """GET an API path (manifests accepted in every media type), on the scheme that answers."""
        bases = [self.base] if self.base else [f"{s}://{self.registry}" for s in self.schemes]
        last: Exception | None = None
        for base in bases:
            url = base + path
            check_url(url, f"the registry {self.registry}")
            try:
                r = self._with_token(url, repository)
            except httpx.HTTPError as exc:
                last = exc
                continue
            self.base = base
            if r.status_code >= 500:
                raise RegistryUnreachable(f"registry {self.registry} answered {r.status_code} for {path}")
            return r
        raise RegistryUnreachable(
            f"registry {self.registry} did not answer: {type(last).__name__}: {last}",
            fix=f"check that {self.registry} is up and reachable from this machine",
        )

    def _with_token(self, url: str, repository: str) -> httpx.Response:
        headers = {"Accept": ACCEPT} | ({"Authorization": f"Bearer {self.token}"} if self.token else {})
        r = self.http.get(url, headers=headers)
        auth = r.headers.get("www-authenticate", "")
        if r.status_code == 401 and auth.lower().startswith("bearer") and not self.token:
            c = _challenge(auth)
            realm = c.get("realm")
            if realm:
                check_url(realm, f"the token service of {self.registry}")
                params = {k: v for k, v in (("service", c.get("service")), ("scope", f"repository:{repository}:pull")) if v}
                t = self.http.get(realm, params=params)
                if t.status_code == 200:
                    doc = t.json()
                    self.token = doc.get("token") or doc.get("access_token")
                    if self.token:
                        return self._with_token(url, repository)
        return r

    def resolve(self, ref: Reference, platform: str = "linux/arm64") -> Resolved:
        target = ref.digest or ref.tag
        path = f"/v2/{ref.repository}/manifests/{target}"
        r = self.get(path, ref.repository)
        if r.status_code in (401, 403, 404):
            raise TagNotFound(
                f"{ref.registry}/{ref.repository}:{ref.tag} is not in the registry (HTTP {r.status_code})",
                fix="check runtime.image in the inventory (name and tag), or push the image",
            )
        r.raise_for_status()
        digest = r.headers.get("docker-content-digest") or ("sha256:" + hashlib.sha256(r.content).hexdigest())
        doc = r.json()
        if doc.get("mediaType", r.headers.get("content-type", "")).split(";")[0] in INDEXES or "manifests" in doc:
            want_os, _, want_arch = platform.partition("/")
            match = [
                m
                for m in doc.get("manifests", [])
                if (m.get("platform") or {}).get("os") == want_os and (m.get("platform") or {}).get("architecture") == want_arch
            ]
            if not match:
                raise TagNotFound(
                    f"{ref.registry}/{ref.repository}:{ref.tag} has no {platform} image",
                    fix=f"build or push the image for {platform}",
                )
            inner = self.get(f"/v2/{ref.repository}/manifests/{match[0]['digest']}", ref.repository)
            inner.raise_for_status()
            doc = inner.json()
        config = (doc.get("config") or {}).get("digest")
        if not config:
            raise TagNotFound(
                f"{ref.registry}/{ref.repository}:{target}: the manifest names no config (schema 1?)",
                fix="push the image again with a current docker (manifest schema 2)",
            )
        if ref.digest and digest != ref.digest:
            raise TagNotFound(f"{ref.registry}/{ref.repository}@{ref.digest}: the registry serves {digest}")
        return Resolved(digest, config, self.identity(ref, config))

    def identity(self, ref: Reference, config: str) -> str:
        """The image identity from the config blob (a few KB), checked against its digest: the one
        thing a node's `docker image inspect` gives under either image store (facts/docker.py)."""
        from sparkctl.transport.image_identity import identity_of_config

        r = self.get(f"/v2/{ref.repository}/blobs/{config}", ref.repository)
        if r.status_code != 200:
            raise TagNotFound(
                f"{ref.registry}/{ref.repository}: the config blob {config} is not served (HTTP {r.status_code})",
                fix="push the image again",
            )
        got = "sha256:" + hashlib.sha256(r.content).hexdigest()
        if got != config:
            raise RegistryUnreachable(
                f"registry {ref.registry} served {got} for the config blob {config}",
                fix=f"check what answers as {ref.registry} (a proxy rewriting content?)",
            )
        return identity_of_config(r.json())


def resolve(
    image: str,
    *,
    platform: str = "linux/arm64",
    insecure: bool = False,
    timeout: float = 5.0,
    transport: Optional[httpx.BaseTransport] = None,
) -> Resolved:
    """Manifest digest and image ID of `image` (tag or name@digest) in its registry now."""
    ref = Reference.parse(image)
    with closing(RegistryClient(ref.api_host, insecure=insecure, timeout=timeout, transport=transport)) as client:
        try:
            return client.resolve(ref, platform)
        except httpx.HTTPError as exc:
            raise RegistryUnreachable(f"registry {ref.registry}: {type(exc).__name__}: {exc}") from None
