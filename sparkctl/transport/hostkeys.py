"""Host-key policies: verify every host against known_hosts; never auto-add blindly.

paramiko's lenient AutoAddPolicy trusts and remembers any key, an attacker's included; sparkctl
sets one of these on every connection instead:

- strict: the host's key must already be in known_hosts; an unknown host is refused.
- accept-new: an unknown host's key is recorded on first contact (like OpenSSH's
  StrictHostKeyChecking=accept-new); a known host presenting a different key is refused.

A changed key is refused under both policies: paramiko raises BadHostKeyException before any
policy is consulted, and `describe_bad_host_key` turns that into the fix to run.
"""

from __future__ import annotations

import base64
import hashlib
import os
import threading
from dataclasses import dataclass
from pathlib import Path

import paramiko

from sparkctl.errors import UnreachableError  # a host-key refusal is an ssh failure, whatever step meets it

_write_lock = threading.Lock()


def fingerprint(key: paramiko.PKey) -> str:
    """OpenSSH-style SHA256 fingerprint, as `ssh-keygen -lf` prints it."""
    digest = hashlib.sha256(key.asbytes()).digest()
    return "SHA256:" + base64.b64encode(digest).decode().rstrip("=")


def known_hosts_name(address: str, port: int) -> str:
    """The name a host is filed under in known_hosts (OpenSSH brackets non-22 ports)."""
    return address if port == 22 else f"[{address}]:{port}"


@dataclass
class _Policy(paramiko.MissingHostKeyPolicy):
    known_hosts: Path
    host_label: str


def add_host_key_fix(address: str, port: int, known_hosts: Path, check: str = "check its key's fingerprint") -> str:
    """How to make a host known under the strict policy (said at connect time and by `inventory validate`)."""
    return (
        f"{check} out of band (on the host: ssh-keygen -lf /etc/ssh/ssh_host_ed25519_key.pub), then add it: "
        f"ssh-keyscan -p {port} {address} >> {known_hosts}; or set host_key_policy: accept-new for first contact"
    )


# What reading known_hosts raises: a file that cannot be opened, or a line paramiko refuses (a
# key that is not base64 raises InvalidHostKey, no SSHException)
UNREADABLE = (OSError, paramiko.SSHException, paramiko.hostkeys.InvalidHostKey)


def read_known_hosts(known_hosts: Path) -> paramiko.HostKeys:
    """known_hosts as paramiko reads it when connecting (hashed `|1|` names included; a line of an
    unknown key type is skipped). One of UNREADABLE for a file it cannot read."""
    return paramiko.HostKeys(str(known_hosts))


def unreadable(exc: BaseException) -> str:
    """Why known_hosts could not be read, in words."""
    if isinstance(exc, paramiko.hostkeys.InvalidHostKey):
        return f"this line is not a host key: {exc.line.strip()[:80]}"
    return exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)


class StrictPolicy(_Policy):
    def missing_host_key(self, client, hostname, key):
        address, _, port = hostname.removeprefix("[").partition("]:")  # known_hosts_name's form
        raise UnreachableError(
            f"{self.host_label}: host key for {hostname} is not in {self.known_hosts} "
            f"(it offered {key.get_name()} {fingerprint(key)}); host_key_policy is strict",
            fix=add_host_key_fix(address, int(port or 22), self.known_hosts, check="verify that fingerprint"),
            reason="host_key",
        )


class AcceptNewPolicy(_Policy):
    """Record an unknown host's key in known_hosts (append-only), then trust it."""

    def missing_host_key(self, client, hostname, key):
        client.get_host_keys().add(hostname, key.get_name(), key)
        line = f"{hostname} {key.get_name()} {key.get_base64()}\n"
        with _write_lock:
            self.known_hosts.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(self.known_hosts, os.O_WRONLY | os.O_APPEND | os.O_CREAT, 0o600)
            with os.fdopen(fd, "a") as f:
                f.write(line)


POLICIES = {"strict": StrictPolicy, "accept-new": AcceptNewPolicy}


def install_policy(client: paramiko.SSHClient, known_hosts: Path, policy: str, host_label: str) -> None:
    """Load known_hosts into the client and set the policy (never paramiko's AutoAddPolicy)."""
    if known_hosts.exists():
        try:
            client.load_host_keys(str(known_hosts))
        except UNREADABLE as exc:
            raise UnreachableError(
                f"{host_label}: cannot read known_hosts {known_hosts}: {unreadable(exc)}",
                fix="check the file's permissions and format (one 'host keytype base64' per line)",
                reason="known_hosts",
            ) from exc
    # the inventory model allows only these two (a typo in code fails here with a KeyError)
    client.set_missing_host_key_policy(POLICIES[policy](known_hosts, host_label))


def describe_bad_host_key(
    exc: paramiko.BadHostKeyException, known_hosts: Path, host_label: str, address: str, port: int
) -> UnreachableError:
    name = known_hosts_name(address, port)
    return UnreachableError(
        f"{host_label}: HOST KEY CHANGED for {name}: known_hosts has {exc.expected_key.get_name()} "
        f"{fingerprint(exc.expected_key)}, the host offered {exc.key.get_name()} {fingerprint(exc.key)}. "
        "Refusing to connect (this is what a man-in-the-middle looks like).",
        fix=(
            f"if the host was reinstalled or its key rotated on purpose, verify the new fingerprint out of band, "
            f"then remove the old entry: ssh-keygen -R '{name}' -f {known_hosts} (and reconnect with "
            "host_key_policy: accept-new, or add the new key by hand)"
        ),
        reason="host_key",
    )
