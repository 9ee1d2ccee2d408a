"""The control machine's side of an inventory: the SSH key and known_hosts it names, checked on
this machine before any host is touched (exit 2, each naming the field and the fix).

Not a rule in validate.py: those judge the file and answer the same on every machine, while these
read this machine's files (the same inventory is right on the operator's laptop and wrong on a CI
runner without the key). So the loader runs them only when asked: `inventory validate` (unless
--file-only) and every command that opens SSH; `render`, `inventory show` and `alerts` reach no
host and skip them, so an inventory renders anywhere.

They judge what `Inventory.ssh_target` resolved (the inventory over ssh_config over sparkctl's
defaults): the target the transport connects with, by its rules. `key_file_problem` is also the
check HostSession.connect makes; hosts are looked up in known_hosts as paramiko does on connect.
Keys ssh_config names (IdentityFile) are not required to exist (ssh skips a missing one, and so
does sparkctl), and with no key file at all the agent may hold the key: neither is refused here.
"""

from __future__ import annotations

import stat
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Optional

from sparkctl.inventory.problems import FieldPath, Problem

if TYPE_CHECKING:
    from paramiko import HostKeys

    from sparkctl.inventory.models import Inventory
    from sparkctl.inventory.ssh_target import SSHTarget

# How an OpenSSH public key file begins (ssh-keygen's KEY.pub, or RFC 4716's export format)
_PUBLIC_KEY_STARTS = (b"ssh-", b"ecdsa-sha2-", b"sk-ssh-", b"sk-ecdsa-", b"---- BEGIN SSH2 PUBLIC KEY")

FIX = (
    "do what each line says, on this machine or in the inventory; `sparkctl inventory validate --file-only` "
    "checks the file alone (for an inventory meant for another control machine)"
)


@dataclass(frozen=True)
class KeyProblem:
    message: str  # names the path, whole
    fix: str


def key_file_problem(path: Path) -> Optional[KeyProblem]:
    """Why the inventory's private key file `path` cannot be used to log in, or None."""
    fix = (
        "point ssh.key (or ssh_defaults.key) at the private key you log in to the hosts with, or remove it "
        "to use ssh_config's IdentityFile or the ssh-agent"
    )
    if path.suffix == ".pub":
        return KeyProblem(
            f"SSH key {path} is a public key (.pub); sparkctl logs in with the private key",
            f"name the private key beside it: {path.with_suffix('')}",
        )
    try:
        mode = path.stat().st_mode
    except FileNotFoundError:
        return KeyProblem(f"SSH key {path} does not exist on this machine", fix)
    except OSError as err:
        return KeyProblem(f"cannot read SSH key {path}: {err.strerror}", "check the path and its permissions")
    if not stat.S_ISREG(mode):  # a directory, or a FIFO that reading would block on
        return KeyProblem(f"SSH key {path} is not a regular file", fix)
    try:
        with path.open("rb") as f:
            head = f.read(64).lstrip()
    except OSError as err:
        return KeyProblem(f"cannot read SSH key {path}: {err.strerror}", "check its permissions (chmod 600, owned by you)")
    if head.startswith(_PUBLIC_KEY_STARTS):
        kind = head.split()[0].decode("ascii", "replace")
        return KeyProblem(
            f"SSH key {path} holds a public key ({kind} ...); sparkctl logs in with the private key",
            "name the private key (the file that begins -----BEGIN OPENSSH PRIVATE KEY-----, usually the same name without .pub)",
        )
    return None


def check_control_machine(inv: Inventory) -> list[Problem]:
    """Every host's key file and, under host_key_policy strict, its known_hosts entry (and its jump
    hosts'), in inventory order: one problem per key field, one per unknown host."""
    problems: list[Problem] = []
    seen: set[object] = set()  # ssh_defaults.key, or a jump host, shared by several hosts: said once
    tables: dict[Path, HostKeys | str] = {}  # known_hosts file -> its entries, or why there are none

    def add(once: object, where: FieldPath, message: str) -> None:
        if once not in seen:
            seen.add(once)
            problems.append(Problem(where, message))

    for name, host in inv.hosts.items():
        t = inv.ssh_target(name)
        if t.key is not None and (bad := key_file_problem(t.key)) is not None:
            where: FieldPath = ("hosts", name, "ssh", "key") if host.ssh.key else ("ssh_defaults", "key")
            add(where, where, f"{bad.message}; fix: {bad.fix}")
        if t.host_key_policy == "strict":
            for where, label, address, port in _hops(inv, name, t):
                if (why := _not_known(t.known_hosts, address, port, tables)) is not None:
                    add((t.known_hosts, address, port), where, f"{label}: {why}")
    return problems


def _hops(inv: Inventory, name: str, t: SSHTarget) -> list[tuple[FieldPath, str, str, int]]:
    """(field to fix, label, address, port) of each SSH server on the way, the host last."""
    if inv.hosts[name].ssh.proxy_jump:
        via: FieldPath = ("hosts", name, "ssh", "proxy_jump")
    elif inv.ssh_defaults.proxy_jump:
        via = ("ssh_defaults", "proxy_jump")
    else:  # ProxyJump from ssh_config: the host's address is what its Host line matched
        via = ("hosts", name, "ssh", "address")
    hops = [(via, f"{name}'s jump host {h.label}", h.address, h.port) for h in t.jumps]
    return [*hops, (("hosts", name, "ssh", "address"), f"{name} ({t.address})", t.address, t.port)]


def _not_known(known_hosts: Path, address: str, port: int, tables: dict[Path, HostKeys | str]) -> Optional[str]:
    """Why `address:port` is not a known host in `known_hosts` (strict refuses it), or None."""
    from sparkctl.transport import hostkeys

    if known_hosts not in tables:
        try:
            tables[known_hosts] = hostkeys.read_known_hosts(known_hosts)
        except FileNotFoundError:
            tables[known_hosts] = "does not exist"
        except hostkeys.UNREADABLE as exc:
            tables[known_hosts] = f"cannot be read ({hostkeys.unreadable(exc)})"
    table = tables[known_hosts]
    entry = hostkeys.known_hosts_name(address, port)  # the name paramiko looks up on connect
    if isinstance(table, str):
        state = f"known_hosts {known_hosts} {table}"
    elif table.lookup(entry) is None:
        state = f"known_hosts {known_hosts} has no line for {entry}"
    else:
        return None
    return f"{state}, and host_key_policy is strict: sparkctl would refuse to connect; fix: {hostkeys.add_host_key_fix(address, port, known_hosts)}"
