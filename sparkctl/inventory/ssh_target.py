"""Where and how to open one SSH connection to an inventory host: what the inventory's `ssh`
settings, ssh_config and sparkctl's defaults resolve to (transport/sshconfig.py builds it,
transport/ssh.py connects with it). Derived, never written in YAML; a module of its own so the
inventory and the ssh_config reader both use it without importing each other.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, ValidationInfo, field_validator

HostKeyPolicy = Literal["strict", "accept-new"]


class _Derived(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class SSHHop(_Derived):
    """One SSH server on the way to a host: a jump host, or the host itself (derived)."""

    label: str  # how messages name it: the name it was given (inventory address or ProxyJump entry)
    address: str  # what is connected to (ssh_config's HostName, else the label's host part)
    user: str
    port: int
    identity_files: tuple[Path, ...] = ()


class SSHTarget(_Derived):
    """Everything needed to open one SSH connection (derived, never written in YAML)."""

    name: str
    address: str
    user: str
    port: int
    key: Optional[Path]  # the inventory's key (must exist), else None
    known_hosts: Path
    host_key_policy: HostKeyPolicy
    connect_timeout: float
    timeout: float = 60.0
    identity_files: tuple[Path, ...] = Field(
        (), validate_default=True
    )  # tried in order: `key`, else ssh_config's IdentityFile lines
    identities_only: bool = False  # ssh_config's IdentitiesOnly: agent keys only if they are identity_files
    jumps: tuple[SSHHop, ...] = ()  # jump hosts, first connected first
    agent: bool = True  # offer the agent's keys after the identity files
    identity_agent: Optional[str] = None  # agent socket from ssh_config; None: $SSH_AUTH_SOCK
    config_file: Optional[Path] = None  # the ssh_config file read, if any (for messages)

    @property
    def where(self) -> str:
        """user@address:port, and the jump hosts it is reached through (for messages and tables)."""
        through = f" through {', '.join(h.label for h in self.jumps)}" if self.jumps else ""
        return f"{self.user}@{self.address}:{self.port}{through}"

    @field_validator("identity_files")
    @classmethod
    def _key_first(cls, value: tuple[Path, ...], info: ValidationInfo) -> tuple[Path, ...]:
        key = info.data.get("key")  # a target written by hand with only `key` still offers it
        return value or ((key,) if key else ())
