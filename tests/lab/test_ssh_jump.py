"""Reaching a host through a jump host, as the operator's ssh_config says: the lab's worker through
the lab's head, with every setting from the lab's own ssh config (/var/lib/sparkctl-lab/ssh/config)
and the host key of each hop verified. Cost: three SSH connections and one Docker request."""

from __future__ import annotations

from pathlib import Path

import paramiko
import pytest
import yaml

from sparkctl.errors import UnreachableError
from sparkctl.inventory.models import Inventory
from sparkctl.transport.ssh import HostSession

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]


def worker_through_head(lab, tmp_path: Path, **defaults) -> Inventory:
    """The lab inventory with no SSH settings of its own but a config file: the operator's usual
    `Host worker / ProxyJump head` in front of the lab's ssh config (paramiko has no Include)."""
    config = tmp_path / "ssh_config"
    config.write_text("Host worker\n  ProxyJump head\n\n" + lab.SSH_CONFIG.read_text())
    data = yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text())
    data["ssh_defaults"] = {"config_file": str(config), "connect_timeout": 5, **defaults}
    data["hosts"]["worker"]["ssh"] = {"address": "worker"}
    return Inventory.model_validate(data)


def test_worker_is_reached_through_head_with_the_ssh_config_settings(lab, tmp_path):
    target = worker_through_head(lab, tmp_path).ssh_target("worker")
    assert [(h.label, h.address) for h in target.jumps] == [("head", "10.231.0.11")]
    assert (target.address, target.key, target.known_hosts) == ("10.231.0.12", None, lab.KNOWN_HOSTS)
    session = HostSession(target)
    try:
        out = session.run("hostname; echo $SSH_CLIENT").check().stdout.split()
        # worker's sshd saw the connection come from head's management address, not from here
        assert out[:2] == ["worker", "10.231.0.11"]
        # Docker over the same jumped connection reaches worker's own engine
        assert session.docker().info()["Name"] == "worker"
    finally:
        session.close()


@pytest.mark.parametrize("policy", ["strict", "accept-new"])
def test_a_changed_host_key_on_the_jump_hop_is_refused_with_the_fix(lab, tmp_path, policy):
    # known_hosts says head has another key (offload's); worker's entry is the real one
    lines = lab.KNOWN_HOSTS.read_text().splitlines()
    impostor = next(line for line in lines if line.startswith("offload,")).split()[2]
    kh = tmp_path / "known_hosts"
    kh.write_text("".join(
        f"{line.split()[0]} ssh-ed25519 {impostor}\n" if line.startswith("head,") else line + "\n" for line in lines
    ))  # fmt: skip
    before = kh.read_text()
    session = HostSession(worker_through_head(lab, tmp_path, known_hosts=str(kh), host_key_policy=policy).ssh_target("worker"))
    with pytest.raises(UnreachableError) as err:
        session.connect()
    assert err.value.message.startswith("worker: jump host head: HOST KEY CHANGED for 10.231.0.11")
    assert f"ssh-keygen -R '10.231.0.11' -f {kh}" in err.value.fix
    assert kh.read_text() == before  # neither policy wrote anything
    assert paramiko.HostKeys(str(kh)).lookup("10.231.0.11")["ssh-ed25519"].get_base64() == impostor
