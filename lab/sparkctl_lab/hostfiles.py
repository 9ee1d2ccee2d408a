"""Files the lab writes: keys, each host's /etc overlay and /root, the runner's SSH config,
known_hosts and the lab inventory (with two pairs, also the second pair's inventory and the fleet file).

A host's own files (its /etc/hosts, its root's known_hosts) name the hosts of its own pair only, so
they never change when the other pair comes or goes; the runner's known_hosts and SSH config name
every host the lab has.

Keys are generated once and kept under CACHE_DIR/keys, so host identities survive
`lab down`/`lab up` (as a real machine's do across reboots) and a warm `up` skips ssh-keygen.
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import shutil
import subprocess
from pathlib import Path

from sparkctl_lab import paths
from sparkctl_lab import topology as topo
from sparkctl_lab.hw import tools

HEADER = """\
# The lab cluster: three simulated hosts in network namespaces on this machine
# (written by `sparkctl lab up`; the same content as inventories/lab.yaml).
"""
HEADER_2 = """\
# The lab's second cluster: head2 and worker2, simulated hosts in network namespaces on this
# machine (written by `sparkctl lab up --clusters 2`; inventories/lab.yaml's runtime, caches and
# alerts on a pair with no offload host: no drafter, no Engram).
"""
HEADER_FLEET = """\
# The lab's fleet: both pairs behind one front door on the first pair's head
# (written by `sparkctl lab up --clusters 2`, removed with the second pair).
"""


def write_if_changed(path: Path, text: str, mode: int = 0o644) -> bool:
    path.parent.mkdir(parents=True, exist_ok=True)
    if path.exists() and path.read_text() == text:
        path.chmod(mode)
        return False
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.chmod(mode)
    tmp.replace(path)
    return True


def _keypair(name: str, comment: str) -> Path:
    """A cached ed25519 key pair (private key path returned)."""
    d = paths.CACHE_DIR / "keys"
    d.mkdir(parents=True, exist_ok=True, mode=0o700)
    key = d / name
    if not key.exists() or not key.with_suffix(".pub").exists():
        key.unlink(missing_ok=True)
        key.with_suffix(".pub").unlink(missing_ok=True)
        subprocess.run(
            ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", comment, "-f", str(key)], check=True, capture_output=True
        )
    return key


def host_public_key(name: str) -> list[str]:
    """[key type, base64 blob] of a lab host's SSH host key."""
    return (paths.CACHE_DIR / "keys" / f"host-{name}.pub").read_text().split()[:2]


SSHD_CONFIG = """\
# sparkctl lab host: key login for root only
Port 22
AddressFamily inet
ListenAddress 0.0.0.0
HostKey /etc/ssh/ssh_host_ed25519_key
PidFile /run/sshd.pid
PermitRootLogin prohibit-password
PubkeyAuthentication yes
PasswordAuthentication no
KbdInteractiveAuthentication no
UsePAM no
AuthorizedKeysFile .ssh/authorized_keys
UseDNS no
PrintMotd no
MaxStartups 64:30:128
MaxSessions 64
AcceptEnv LANG LC_*
Subsystem sftp /usr/lib/openssh/sftp-server
"""


def daemon_json(name: str) -> str:
    h = paths.host_dir(name)
    return (
        json.dumps(
            {
                "data-root": str(h / "docker"),
                "hosts": ["unix:///var/run/docker.sock", f"unix://{paths.docker_socket(name)}"],
                "bridge": "none",
                "iptables": False,
                "ip-forward": False,
                "ip-masq": False,
                "userland-proxy": False,
                "insecure-registries": [topo.REGISTRY],
                "cgroup-parent": f"sparkctl-{paths.PREFIX}-{name}",
                "deprecated-key-path": str(h / "docker-key.json"),
                "storage-driver": "overlay2",
                "log-level": "warn",
            },
            indent=2,
        )
        + "\n"
    )


def own_pair(name: str) -> dict[str, topo.LabHost]:
    """The hosts of the pair (cluster) host `name` belongs to."""
    return topo.SECOND_PAIR if name in topo.SECOND_PAIR else topo.HOSTS


def etc_hosts(name: str) -> str:
    lines = ["127.0.0.1\tlocalhost", f"{topo.RUNNER_ADDRESS}\tlab-runner"]
    lines += [f"{h.mgmt_ip}\t{h.name}" for h in own_pair(name).values()]
    return "\n".join(lines) + "\n"


def shadow_without_locked_root() -> str:
    """/etc/shadow with root's password field "*": `UsePAM no` refuses key login when it starts with "!"."""
    return re.sub(r"^root:[^:\n]*", "root:*", Path("/etc/shadow").read_text(), flags=re.M)


def known_hosts(host_set: dict[str, topo.LabHost]) -> str:
    lines = []
    for h in host_set.values():
        kind, blob = host_public_key(h.name)
        names = ",".join([h.name] + h.addresses)
        lines.append(f"{names} {kind} {blob}")
    return "\n".join(lines) + "\n"


def ssh_config(host_set: dict[str, topo.LabHost]) -> str:
    out = [f"# sparkctl lab: `ssh -F {paths.SSH_CONFIG} head` (or put LAB_DIR/bin first on PATH)"]
    for h in host_set.values():
        out += [
            f"Host {h.name} {h.netns} {h.mgmt_ip}",
            f"  HostName {h.mgmt_ip}",
        ]
    out += [
        "Host *",
        "  User root",
        "  Port 22",
        f"  IdentityFile {paths.SSH_KEY}",
        "  IdentitiesOnly yes",
        f"  UserKnownHostsFile {paths.KNOWN_HOSTS}",
        "  GlobalKnownHostsFile /dev/null",
        "  StrictHostKeyChecking yes",
        "  BatchMode yes",
        "  ConnectTimeout 5",
        "  LogLevel ERROR",
    ]
    return "\n".join(out) + "\n"


def inventory_yaml() -> str:
    import yaml

    doc = topo.inventory_doc(str(paths.SSH_KEY), str(paths.KNOWN_HOSTS))
    return HEADER + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def inventory_2_yaml() -> str:
    import yaml

    doc = topo.second_inventory_doc(str(paths.SSH_KEY), str(paths.KNOWN_HOSTS))
    return HEADER_2 + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


def fleet_yaml(folder: Path = paths.FLEET_PATH.parent) -> str:
    """The fleet file for `folder` (its inventories and the router's wheel beside it: the wheel is
    written there when absent)."""
    import yaml

    from sparkctl_lab.router_wheel import router_wheel

    wheel = router_wheel(folder)
    doc = topo.fleet_doc((paths.INVENTORY_PATH.name, paths.INVENTORY_2_PATH.name), wheel.name)
    return HEADER_FLEET + yaml.safe_dump(doc, sort_keys=False, default_flow_style=False)


FLEET_FILES = (paths.INVENTORY_2_PATH, paths.FLEET_PATH)  # what only a two-pair lab has beside inventory.yaml


def engram_tables() -> bool:
    """The simulated Engram tables (inventory engram.size_gib, in 64 MiB files + SHA256SUMS), made once."""
    d = paths.ENGRAM_CACHE
    if (d / "SHA256SUMS").exists():
        return False
    tmp = d.with_name(d.name + ".partial")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    chunk = 64 << 20
    total = topo.ENGRAM_TABLE_BYTES
    sums = []
    for i in range((total + chunk - 1) // chunk):
        data = os.urandom(min(chunk, total - i * chunk))
        name = f"engram-table-{i:03d}.bin"
        (tmp / name).write_bytes(data)
        sums.append(f"{hashlib.sha256(data).hexdigest()}  {name}")
    (tmp / "SHA256SUMS").write_text("\n".join(sums) + "\n")
    shutil.rmtree(d, ignore_errors=True)
    tmp.rename(d)
    return True


def prepare(changes: list[str], clusters: int = 1) -> None:
    """Everything on disk the hosts and the runner need before the hosts start (idempotent), for a
    lab of `clusters` pairs."""
    host_set = topo.hosts(clusters)
    if engram_tables():
        changes.append(f"Engram tables ({topo.ENGRAM_TABLE_BYTES >> 20} MiB) for {topo.ENGRAM_HOST}")
    client = _keypair("client", "sparkctl-lab")
    key, pub = client.read_text(), client.with_suffix(".pub").read_text()
    for h in host_set.values():
        _keypair(f"host-{h.name}", f"root@{h.name}")
    changed = [
        write_if_changed(paths.SSH_KEY, key, 0o600),
        write_if_changed(paths.SSH_KEY.with_name(paths.SSH_KEY.name + ".pub"), pub),
        write_if_changed(paths.KNOWN_HOSTS, known_hosts(host_set)),
        write_if_changed(paths.SSH_CONFIG, ssh_config(host_set)),
        write_if_changed(paths.INVENTORY_PATH, inventory_yaml()),
        write_if_changed(paths.BIN_DIR / "ssh", f'#!/bin/sh\nexec /usr/bin/ssh -F {paths.SSH_CONFIG} "$@"\n', 0o755),
        write_if_changed(paths.BIN_DIR / "scp", f'#!/bin/sh\nexec /usr/bin/scp -F {paths.SSH_CONFIG} "$@"\n', 0o755),
    ]
    if clusters == 2:
        changed += [
            write_if_changed(paths.INVENTORY_2_PATH, inventory_2_yaml()),
            write_if_changed(paths.FLEET_PATH, fleet_yaml()),
        ]
    paths.FAULTS_DIR.mkdir(parents=True, exist_ok=True)

    shadow = shadow_without_locked_root()
    for h in host_set.values():
        d = paths.host_dir(h.name)
        etc = d / "etc" / "upper"
        (d / "etc" / "work").mkdir(parents=True, exist_ok=True)
        (d / "log").mkdir(parents=True, exist_ok=True)
        hk = paths.CACHE_DIR / "keys" / f"host-{h.name}"
        root = d / "root"
        root.mkdir(mode=0o700, exist_ok=True)
        root.chmod(0o700)
        (root / ".ssh").mkdir(mode=0o700, exist_ok=True)
        changed += [
            write_if_changed(etc / "hostname", h.name + "\n"),
            write_if_changed(etc / "hosts", etc_hosts(h.name)),
            write_if_changed(etc / "ssh" / "sshd_config", SSHD_CONFIG),
            write_if_changed(etc / "ssh" / "ssh_host_ed25519_key", hk.read_text(), 0o600),
            write_if_changed(etc / "ssh" / "ssh_host_ed25519_key.pub", hk.with_suffix(".pub").read_text()),
            write_if_changed(etc / "docker" / "daemon.json", daemon_json(h.name)),
            write_if_changed(etc / "shadow", shadow, 0o640),
            write_if_changed(root / ".ssh" / "authorized_keys", pub, 0o600),
            write_if_changed(root / ".ssh" / "id_ed25519", key, 0o600),
            write_if_changed(root / ".ssh" / "id_ed25519.pub", pub),
            write_if_changed(root / ".ssh" / "known_hosts", known_hosts(own_pair(h.name))),
        ]
        changed += [write_if_changed(d / "bin" / name, text, 0o755) for name, text in tools.scripts(h.name).items()]
        if not paths.faults_file(h.name).exists():
            paths.faults_file(h.name).write_text("{}")
    if any(changed):
        changes.append(
            "lab files (keys, host configs, ssh config, inventory" + (", inventory-2, fleet)" if clusters == 2 else ")")
        )
