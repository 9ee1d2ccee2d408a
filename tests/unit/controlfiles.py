"""An inventory this machine can use: a key and a known_hosts of its own naming every host.

Every command that opens SSH first checks the control machine's files (sparkctl/inventory/control.py):
the key must exist, and under host_key_policy strict each host must be in known_hosts. A test that runs
such a command against hosts where nothing (or a stand-in) listens gives its inventory these files,
instead of the lab's (under /var/lib/sparkctl-lab, there only while the lab is up).
"""

from __future__ import annotations

import copy
from pathlib import Path

from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from cryptography.hazmat.primitives.serialization import Encoding, NoEncryption, PrivateFormat, PublicFormat


def usable_here(doc: dict, folder: Path) -> dict:
    """`doc` (an inventory as YAML loads it) with ssh_defaults.key and .known_hosts in `folder`: a new
    key, and one known_hosts line per host at its address and port (a made-up host key: nothing is
    contacted that would show another)."""
    doc = copy.deepcopy(doc)
    key = Ed25519PrivateKey.generate()
    (folder / "id_ed25519").write_bytes(key.private_bytes(Encoding.PEM, PrivateFormat.OpenSSH, NoEncryption()))
    (folder / "id_ed25519").chmod(0o600)
    host_key = Ed25519PrivateKey.generate().public_key().public_bytes(Encoding.OpenSSH, PublicFormat.OpenSSH).decode()
    defaults = doc.setdefault("ssh_defaults", {})
    lines = []
    for host in doc["hosts"].values():
        address, port = host["ssh"]["address"], host["ssh"].get("port") or defaults.get("port") or 22
        lines.append(f"{address if port == 22 else f'[{address}]:{port}'} {host_key}\n")
    (folder / "known_hosts").write_text("".join(lines))
    defaults.update(key=str(folder / "id_ed25519"), known_hosts=str(folder / "known_hosts"))
    return doc
