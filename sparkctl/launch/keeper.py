"""Where the keeper lives on the head: its systemd unit and the files beside it, and the comment
its SSH key carries in each host's authorized_keys. Shared by the keeper step that installs them
(steps/keeper.py), the facts that read them back (facts/keeper.py), doctor and `inventory show`."""

from __future__ import annotations

UNIT = "sparkctl-keeper.service"
UNIT_PATH = f"/etc/systemd/system/{UNIT}"
DIR = "/etc/sparkctl/keeper"  # root only (0700): the inventory may hold runtime.env's secret values
INVENTORY = f"{DIR}/inventory.yaml"
KEY = f"{DIR}/id_ed25519"  # the head's own key to the cluster's hosts (and itself)
KNOWN_HOSTS = f"{DIR}/known_hosts"


def key_comment(cluster: str) -> str:
    """The comment the key carries in each host's authorized_keys: how `down` finds it again."""
    return f"sparkctl-keeper@{cluster}"
