"""What `up` installs on the head for the keeper (steps/keeper.py), as text it can compare: the
systemd unit, the inventory the keeper runs with (this inventory, reaching every host with the
head's own key) and the known_hosts it verifies them against. Where each lives: launch/keeper.py.

On DGX OS the unit runs under systemd; the lab's hosts have no systemd, and the lab puts a
stand-in `systemctl` on their PATH that runs enabled units from the head's own PID 1
(lab/sparkctl_lab/hw/systemctl.py, docs/keeper.md "In the lab").
"""

from __future__ import annotations

import os
from typing import TYPE_CHECKING

from sparkctl.launch.keeper import INVENTORY, KEY, KNOWN_HOSTS

if TYPE_CHECKING:
    from sparkctl.inventory.models import Inventory


def render_unit(inv: Inventory, command: str) -> str:
    from sparkctl.templates import render_template
    from sparkctl.transport.guard import ENV

    return render_template(
        "sparkctl-keeper.service.j2",
        cluster=inv.cluster.name,
        command=command,
        inventory=INVENTORY,
        fence=os.environ.get(ENV, ""),  # a fenced sparkctl installs a fenced keeper
    )


def keeper_inventory(inv: Inventory) -> str:
    """This inventory as the keeper on the head runs it: every host reached at the address, user
    and port this machine resolved (no ssh_config, no jump host, no agent there), with the head's
    own key and the known_hosts written beside it."""
    import yaml

    doc = inv.model_dump(mode="json", exclude_none=True)
    doc["ssh_defaults"] = {
        **{k: v for k, v in doc.get("ssh_defaults", {}).items() if k in ("connect_timeout", "timeout")},
        "key": KEY,
        "known_hosts": KNOWN_HOSTS,
        "config_file": "none",
        "proxy_jump": "none",
        "agent": False,
        "host_key_policy": "strict",
    }
    for name, host in doc["hosts"].items():
        t = inv.ssh_target(name)
        host["ssh"] = {"address": t.address, "user": t.user, "port": t.port}
    header = f"# written by `sparkctl up` for the keeper of cluster {inv.cluster.name} (docs/keeper.md); root only\n"
    return header + yaml.safe_dump(doc, sort_keys=False)


def known_hosts_lines(inv: Inventory, server_keys: dict) -> str:
    """known_hosts for the keeper: each host's key as this run verified it (host -> paramiko PKey)."""
    from sparkctl.transport.hostkeys import known_hosts_name

    out = []
    for name in inv.hosts:
        key = server_keys.get(name)
        if key is not None:
            t = inv.ssh_target(name)
            out.append(f"{known_hosts_name(t.address, t.port)} {key.get_name()} {key.get_base64()}")
    return "\n".join(out) + "\n"


def digest(text: str) -> str:
    import hashlib

    return hashlib.sha256(text.encode()).hexdigest()
