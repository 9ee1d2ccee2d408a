"""Reach hosts the way the operator's own `ssh` does: settings the inventory leaves unset come from
the OpenSSH client config (~/.ssh/config), read with paramiko's own parser (paramiko.SSHConfig).

Precedence, setting by setting: the host's `ssh` section > `ssh_defaults` > the ssh_config file >
sparkctl's default (user root, port 22, ~/.ssh/known_hosts, OpenSSH's default identities, the agent
on). The inventory's `address` is what ssh_config's Host lines are matched against, as in
`ssh ADDRESS`; its HostName, if set, is the address connected to.

Read from ssh_config: HostName, User, Port, IdentityFile, IdentitiesOnly, IdentityAgent, ProxyJump,
UserKnownHostsFile, with Include lines followed. Never from it: host-key checking. The inventory's host_key_policy (strict unless
it says accept-new) applies on every hop; ssh_config's StrictHostKeyChecking cannot turn it off.
ProxyCommand is refused (an arbitrary command, whose destination the network fence cannot check):
ProxyJump does the same job.
"""

from __future__ import annotations

import functools
import glob
import re
from pathlib import Path
from typing import Any, Callable, Optional

from sparkctl.errors import InputError
from sparkctl.inventory.ssh_target import SSHHop, SSHTarget

DEFAULT_CONFIG = "~/.ssh/config"
DEFAULT_KNOWN_HOSTS = "~/.ssh/known_hosts"
# OpenSSH's own default identities, tried when neither the inventory nor ssh_config names one
DEFAULT_IDENTITIES = ("~/.ssh/id_ed25519", "~/.ssh/id_ecdsa", "~/.ssh/id_rsa")
MAX_JUMPS = 8  # a longer chain is a ProxyJump loop (a host that jumps through itself)

Lookup = Callable[[str], dict[str, Any]]


_INCLUDE = re.compile(r"\s*include(?:\s*=\s*|\s+)(.+)", re.IGNORECASE)
MAX_INCLUDE_DEPTH = 16  # ssh's own limit


def _text(path: Path, depth: int = 0) -> str:
    """The file with its Include lines replaced by the files they name (paramiko's parser does
    not read Include): globs, relative to ~/.ssh as ssh takes them, files that match none skipped."""
    if depth > MAX_INCLUDE_DEPTH:
        raise InputError(
            f"ssh config {path}: Include nests deeper than {MAX_INCLUDE_DEPTH}",
            fix="an Include line includes its own file: remove the loop",
        )
    lines = []
    for line in path.read_text(encoding="utf-8").splitlines():
        include = _INCLUDE.fullmatch(line)
        if include is None:
            lines.append(line)
            continue
        for pattern in include.group(1).split():
            pattern = str(Path("~/.ssh").expanduser() / Path(pattern).expanduser())  # an absolute one stays
            lines += [_text(Path(p), depth + 1) for p in sorted(glob.glob(pattern)) if Path(p).is_file()]
    return "\n".join(lines)


@functools.lru_cache(maxsize=8)
def _parse(path: str, mtime_ns: int):  # mtime in the key: an edited file is read again
    import paramiko

    return paramiko.SSHConfig.from_text(_text(Path(path)))


def load(config_file: Optional[str]) -> tuple[Optional[Any], Optional[Path]]:
    """(parsed config, its path); (None, None) for `none` or an absent default file."""
    if config_file == "none":
        return None, None
    path = Path(config_file or DEFAULT_CONFIG).expanduser()
    fix = "fix the file, or set ssh_defaults.config_file: none to read no ssh_config"
    try:
        mtime = path.stat().st_mtime_ns
    except FileNotFoundError:
        if config_file is None:
            return None, None  # like ssh: no ~/.ssh/config is no settings
        raise InputError(
            f"ssh config_file {path} does not exist",
            fix="point ssh_defaults.config_file (or the host's ssh.config_file) at an OpenSSH client config, or write none",
        ) from None
    except OSError as exc:
        raise InputError(f"cannot read ssh config {path}: {exc.strerror}", fix=fix) from None
    import paramiko

    try:
        return _parse(str(path), mtime), path
    except (OSError, UnicodeDecodeError, paramiko.ssh_exception.ConfigParseError) as exc:
        raise InputError(f"cannot read ssh config {path}: {exc}", fix=fix) from None


def _port(value: Any, what: str, config: Optional[Path]) -> int:
    try:
        port = int(value)
    except (TypeError, ValueError):
        port = 0
    if not 1 <= port <= 65535:
        raise InputError(
            f"{what}: port {value!r} (from {config or 'ProxyJump'}) is not a port number", fix="write a port between 1 and 65535"
        )
    return port


def _paths(values: Any) -> tuple[Path, ...]:
    if isinstance(values, str):
        values = values.split()  # UserKnownHostsFile may list several
    return tuple(Path(v).expanduser() for v in values or () if v.lower() != "none")


def _identities(options: dict[str, Any]) -> tuple[Path, ...]:
    # a missing IdentityFile is skipped, as ssh does (a Host * line often lists keys some hosts lack)
    named = [p for p in _paths(options.get("identityfile")) if p.exists()]
    if named or "identityfile" in options:
        return tuple(named)
    return tuple(p for p in _paths(DEFAULT_IDENTITIES) if p.exists())


def _refuse_proxy_command(name: str, host: str, options: dict[str, Any], config: Optional[Path]) -> None:
    command = options.get("proxycommand")
    if command and command.lower() != "none":
        raise InputError(
            f"{name}: {config} gives {host} a ProxyCommand, which sparkctl does not run",
            fix=f"use ProxyJump for {host} in {config} (or ssh.proxy_jump in the inventory); "
            "ssh.config_file: none ignores the file",
        )


def _split_jump(entry: str, name: str) -> tuple[Optional[str], str, Optional[int]]:
    """`[user@]host[:port]` or `ssh://[user@]host[:port]`, as ssh -J takes them."""
    spec = entry.removeprefix("ssh://")
    user, _, hostport = spec.rpartition("@")
    host, port = hostport, None
    if hostport.startswith("["):  # [v6 address]:port
        host, _, rest = hostport[1:].partition("]")
        port = rest.removeprefix(":") or None
    elif hostport.count(":") == 1:
        host, port = hostport.split(":")
    if not host:
        raise InputError(f"{name}: jump host {entry!r} names no host", fix="write it as [user@]host[:port]")
    return user or None, host, _port(port, f"{name}: jump host {entry}", None) if port else None


def _route(
    spec: str, lookup: Lookup, config: Optional[Path], name: str, user: str, identities: tuple[Path, ...], depth: int = 0
) -> tuple[SSHHop, ...]:
    """The jump hosts of a ProxyJump value, in connection order. Only the first entry's own
    ProxyJump is followed (ssh -J a,b reaches b through a, whatever b's config says)."""
    hops: list[SSHHop] = []
    entries = [e.strip() for e in spec.split(",") if e.strip()]
    for i, entry in enumerate(entries):
        hop_user, host, hop_port = _split_jump(entry, name)
        options = lookup(host)
        _refuse_proxy_command(name, host, options, config)
        own = options.get("proxyjump")
        if i == 0 and own and own.lower() != "none":
            if depth >= MAX_JUMPS:
                raise InputError(
                    f"{name}: ProxyJump in {config} goes round in a loop through {host}",
                    fix=f"give {host} no ProxyJump of its own (e.g. `Host * !{host}` on the line that sets it)",
                )
            hops.extend(_route(own, lookup, config, name, user, identities, depth + 1))
        where = f"{name}: jump host {host}"
        hops.append(
            SSHHop(
                label=host,
                address=options.get("hostname", host),
                user=hop_user or options.get("user") or user,
                port=hop_port or _port(options.get("port", 22), where, config),
                # its own IdentityFile, else the host's keys (the same team's bastion, usually)
                identity_files=tuple(p for p in _paths(options.get("identityfile")) if p.exists()) or identities,
            )
        )
    if len(hops) > MAX_JUMPS:
        raise InputError(f"{name}: more than {MAX_JUMPS} jump hosts", fix="check ProxyJump for a loop")
    return tuple(hops)


def resolve(name: str, ssh: dict[str, Any]) -> SSHTarget:
    """SSHTarget for inventory host `name` from its merged inventory settings (`ssh`: the host's
    keys over ssh_defaults, unset ones None, paths already resolved)."""
    config, config_path = load(ssh["config_file"])

    def lookup(host: str) -> dict[str, Any]:
        if config is None:
            return {"hostname": host}
        try:
            return config.lookup(host)
        except Exception as exc:  # noqa: BLE001 - Match exec without invoke installed, canonicalization
            raise InputError(
                f"{name}: cannot look {host} up in {config_path}: {type(exc).__name__}: {exc}",
                fix="fix the Match/Canonicalize lines for this host, or set ssh.config_file: none",
            ) from None

    options = lookup(ssh["address"])
    _refuse_proxy_command(name, ssh["address"], options, config_path)

    user = ssh["user"] or options.get("user") or "root"
    port = ssh["port"] or _port(options.get("port", 22), name, config_path)
    identities = (ssh["key"],) if ssh["key"] else _identities(options)
    known_hosts = ssh["known_hosts"] or next(iter(_paths(options.get("userknownhostsfile"))), None)

    # Agent: on by default, also next to a key (a passphrase-protected key is usually unlocked
    # in the agent, and the key file is tried first anyway); IdentityAgent none or agent: false
    # turns it off, and IdentitiesOnly limits it to the named identities' keys, as in ssh.
    socket_path = options.get("identityagent")
    agent = ssh["agent"] if ssh["agent"] is not None else (socket_path or "").lower() != "none"
    if socket_path and socket_path.lower() in ("none", "ssh_auth_sock"):
        socket_path = None
    elif socket_path:
        socket_path = str(Path(socket_path).expanduser())

    jump = ssh["proxy_jump"] or options.get("proxyjump")
    jumps = () if not jump or jump.lower() == "none" else _route(jump, lookup, config_path, name, user, identities)
    return SSHTarget(
        name=name,
        address=options.get("hostname", ssh["address"]),
        user=user,
        port=port,
        key=ssh["key"],
        known_hosts=known_hosts or Path(DEFAULT_KNOWN_HOSTS).expanduser(),
        host_key_policy=ssh["host_key_policy"],
        connect_timeout=ssh["connect_timeout"],
        timeout=ssh["timeout"],
        identity_files=identities,
        identities_only=str(options.get("identitiesonly", "no")).lower() == "yes",
        jumps=jumps,
        agent=agent,
        identity_agent=socket_path,
        config_file=config_path,
    )
