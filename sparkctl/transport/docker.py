"""Docker Engine on a host through the Docker SDK, over the host's existing SSH connection.

docker-py's own `ssh://` transport opens a second SSH connection with its own host-key handling
(~/.ssh/config and ~/.ssh/known_hosts of whoever runs sparkctl). We instead hand it the
connection `HostSession` already opened and verified: each HTTP connection to the engine is a
channel on that transport running `docker system dial-stdio`, exactly what docker-py's paramiko
path does, so there is one SSH connection per host per run and one host-key policy.
The API version is negotiated with the engine (lab: Debian's 20.10 speaks 1.41).

Deadlines: every request has the inventory's ssh.timeout as its socket timeout (docker-py adds
a stop's own drain time to it), and the session's watchdog ends any request on a host that
stopped answering. Library errors (APIError 409, connection resets) are turned into sparkctl's
messages by `HostSession.explain` (transport/failures.py).

A registry's credentials are the node's (`registry_auth`: its `docker login`), sent with a pull or
a registry question as the docker CLI on the node would send them.
"""

from __future__ import annotations

import json
import re
from typing import Optional

import docker
from docker.transport.basehttpadapter import BaseHTTPAdapter
from docker.transport.sshconn import SSHHTTPAdapter

from sparkctl.errors import HostError

# Lowest version docker-py knows; only used until the real one is negotiated.
_BOOTSTRAP_VERSION = "1.24"
# The key of the adapter's one connection pool (any URL of the engine: only the key is used)
_ENGINE = "http+docker://ssh"
# a credential helper's name, as docker-credential-<name> (never a shell word of its own)
_HELPER = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]*")


class _SharedSSHAdapter(SSHHTTPAdapter):
    """docker-py's SSH adapter, but on a paramiko client we own (never reconnects or closes it)."""

    def __init__(self, ssh_client, host_label: str, timeout: float = 60):
        super().__init__(host_label, timeout, shell_out=True)  # shell_out: it opens no SSH connection itself
        self.ssh_client = ssh_client

    def get_connection(self, url, proxies=None):
        # docker-py keys its pools by the whole request URL, so every new path (a container's ID,
        # a query) opened a channel and a `docker system dial-stdio` on the host of its own: 29 in
        # one lab restart. Every request to one engine can share the same keep-alive connections.
        return super().get_connection(_ENGINE, proxies)

    def _connect(self):  # docker-py calls it to reconnect a client whose transport is gone
        raise HostError(f"{self.ssh_host}: the SSH connection to this host was closed")

    def close(self):
        BaseHTTPAdapter.close(self)  # the SSH client belongs to HostSession


def docker_over_ssh(session) -> docker.DockerClient:
    """A DockerClient for `session`'s host; the API version negotiated with its engine.
    Each request waits for an answer at most the inventory's ssh.timeout."""
    t = session.target
    timeout = session.timeout
    # use_ssh_client=True makes docker-py skip opening its own paramiko connection at init;
    # we then mount our adapter in its place before any request is made.
    api = docker.APIClient(
        base_url=f"ssh://{t.user}@{t.address}:{t.port}",
        version=_BOOTSTRAP_VERSION,
        timeout=timeout,
        use_ssh_client=True,
    )
    adapter = _SharedSSHAdapter(session.paramiko_client, t.name, timeout=timeout)
    api._custom_adapter = adapter
    api.mount("http+docker://ssh", adapter)
    try:
        api._version = api._retrieve_server_version()
    except docker.errors.DockerException as exc:
        if session.dead is not None:
            raise session.dead from None
        raise HostError(
            f"{t.name}: Docker Engine did not answer over SSH: {exc}",
            fix="check that dockerd runs on the host and that the SSH user may use it (root or the docker group)",
        ) from None
    except Exception as exc:  # the SSH connection broke under the request
        raise session.explain(exc) from None
    client = docker.DockerClient.__new__(docker.DockerClient)
    client.api = api
    return client


def registry_auth(session, registry: str) -> Optional[dict]:
    """The credentials `docker login REGISTRY` left on the host for the SSH user, as the docker CLI
    there sends them with a pull (X-Registry-Auth): its config.json's `auths` entry, or what its
    credential helper (credHelpers, credsStore) answers, run on the host. None when it holds none
    (docker-py then sends what this machine's docker config holds, if anything). The values are
    remembered as secrets (masked in every output) and never written anywhere."""
    from docker.auth import INDEX_NAME, INDEX_URL, AuthConfig

    from sparkctl.transport.redact import remember_secret

    r = session.run('cat "${DOCKER_CONFIG:-$HOME/.docker}/config.json"')
    try:
        config = json.loads(r.stdout) if r.ok else {}
    except ValueError:
        config = {}
    if not isinstance(config, dict):
        return None
    key = INDEX_URL if registry in (INDEX_NAME, "index.docker.io") else registry  # the CLI's key for Docker Hub
    found: Optional[dict] = None
    helper = (config.get("credHelpers") or {}).get(key) or config.get("credsStore")
    if isinstance(helper, str) and _HELPER.fullmatch(helper):
        got = session.run([f"docker-credential-{helper}", "get"], stdin=key.encode())
        try:
            doc = json.loads(got.stdout) if got.ok else {}
        except ValueError:
            doc = {}
        if doc.get("Secret"):
            user, secret = doc.get("Username") or "", doc["Secret"]
            found = (
                {"identitytoken": secret} if user == "<token>" else {"username": user, "password": secret, "serveraddress": key}
            )
    if found is None:  # the auths entries, read as docker-py reads them (base64 user:password, identity tokens)
        auths = AuthConfig({"auths": AuthConfig.parse_auth(config.get("auths") or {})})
        entry = auths.resolve_authconfig(registry) or None
        if entry:
            token = entry.get("IdentityToken")
            found = {"identitytoken": token} if token else {k: v for k, v in entry.items() if v}
    if found:
        for k in ("password", "identitytoken"):
            if found.get(k):
                remember_secret(str(found[k]))
    return found
