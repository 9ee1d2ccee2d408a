"""The lab's second Spark pair, on paper: its cables and addresses, the second inventory and the
fleet file exactly as `lab up --clusters 2` writes them (hostfiles' own functions), and the
refusal of a count the lab cannot have. No lab needed (tests/lab/test_lab_clusters.py brings it up)."""

from __future__ import annotations

import ipaddress
import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
import yaml

from sparkctl.errors import SparkctlError
from sparkctl.fleet.model import load_fleet
from sparkctl.inventory.loader import load_inventory
from sparkctl_lab import clusters, hostfiles, paths
from sparkctl_lab import topology as topo

REPO = Path(__file__).resolve().parents[2]
SHIPPED = yaml.safe_load((REPO / "inventories" / "lab.yaml").read_text())


def _subnet(nic: topo.Nic) -> str:
    return str(ipaddress.ip_interface(nic.address).network)


def test_the_second_pair_is_two_sparks_joined_by_two_rails_of_their_own():
    second = [c for c in topo.cables() if c.a in topo.SECOND_PAIR or c.b in topo.SECOND_PAIR]
    assert [(c.a, c.a_nic.device, c.b, c.b_nic.device, _subnet(c.a_nic), c.a_nic.mtu) for c in second] == [
        ("head2", "enp1s0f0np0", "worker2", "enp1s0f0np0", "10.231.102.0/24", 9000),
        ("head2", "enP2p1s0f0np0", "worker2", "enP2p1s0f0np0", "10.231.103.0/24", 9000),
    ]
    assert all(_subnet(c.a_nic) == _subnet(c.b_nic) and c.b_nic.mtu == 9000 for c in second)
    # the same NICs as the first pair's rails, and no link to an offload host
    first_rails = [n.device for n in topo.HOSTS["head"].fabric if n.peer == "worker"]
    for name in topo.SECOND_PAIR:
        assert [n.device for n in topo.SECOND_PAIR[name].fabric] == first_rails
    assert {h.role for h in topo.SECOND_PAIR.values()} == {"head", "worker"}
    assert (topo.SECOND_PAIR["head2"].mgmt_ip, topo.SECOND_PAIR["worker2"].mgmt_ip) == ("10.231.0.21", "10.231.0.22")


def test_the_first_pair_is_as_it_always_was():
    assert list(topo.hosts(1)) == list(topo.HOSTS) == ["head", "worker", "offload"]
    assert list(topo.hosts(2)) == ["head", "worker", "offload", "head2", "worker2"]
    assert [(c.a, c.b, _subnet(c.a_nic)) for c in topo.cables(topo.HOSTS)] == [
        ("head", "worker", "10.231.100.0/24"),
        ("head", "worker", "10.231.101.0/24"),
        ("head", "offload", "10.231.110.0/24"),
        ("worker", "offload", "10.231.111.0/24"),
    ]
    assert topo.NETNS == ["lab-switch", "lab-head", "lab-worker", "lab-offload"]
    # inventory.yaml is still the shipped file (the lab test compares the file `lab up` wrote)
    doc = topo.inventory_doc("/var/lib/sparkctl-lab/ssh/id_ed25519", "/var/lib/sparkctl-lab/ssh/known_hosts")
    assert doc == SHIPPED


def test_every_address_of_the_two_pair_lab_is_its_own_and_inside_the_lab_range():
    lab = [ipaddress.ip_network(s) for s in topo.SUBNETS]
    addresses = [ip for h in topo.ALL_HOSTS.values() for ip in h.addresses] + [topo.RUNNER_ADDRESS]
    assert len(addresses) == len(set(addresses))
    assert all(any(ipaddress.ip_address(a) in s for s in lab) for a in addresses)
    # each fabric subnet is one cable's: exactly its two ends
    ends: dict[str, list[str]] = {}
    for h in topo.ALL_HOSTS.values():
        for n in h.fabric:
            ends.setdefault(_subnet(n), []).append(h.name)
    assert all(len(v) == 2 for v in ends.values()), ends
    assert len({h.netns for h in topo.ALL_HOSTS.values()}) == 5


def _written(tmp_path: Path) -> Path:
    """The three files `lab up --clusters 2` writes, side by side as in LAB_DIR."""
    (tmp_path / paths.INVENTORY_PATH.name).write_text(hostfiles.inventory_yaml())
    (tmp_path / paths.INVENTORY_2_PATH.name).write_text(hostfiles.inventory_2_yaml())
    (tmp_path / paths.FLEET_PATH.name).write_text(hostfiles.fleet_yaml(tmp_path))
    return tmp_path


def test_the_second_inventory_is_the_shipped_runtime_on_head2_and_worker2_without_an_offload_host(tmp_path):
    inv = load_inventory(_written(tmp_path) / "inventory-2.yaml")  # validates (what `inventory validate` runs)
    assert inv.cluster.name == "lab-2"
    assert list(inv.hosts) == ["head2", "worker2"]
    assert {h.role for h in inv.hosts.values()} == {"head", "worker"}
    assert inv.engram is None and inv.runtime.speculative is None
    assert inv.runtime.image == SHIPPED["runtime"]["image"] == topo.IMAGE
    assert inv.ssh_target("head2").address == "10.231.0.21" and inv.ssh_target("worker2").address == "10.231.0.22"
    assert inv.ssh_target("head2").key == paths.SSH_KEY and inv.ssh_target("worker2").known_hosts == paths.KNOWN_HOSTS
    doc = yaml.safe_load((tmp_path / "inventory-2.yaml").read_text())
    assert "engram" not in doc and "offload" not in doc["hosts"]
    assert doc["runtime"] == {k: v for k, v in SHIPPED["runtime"].items() if k != "speculative"}
    assert (doc["caches"], doc["alerts"], doc["ssh_defaults"]) == (SHIPPED["caches"], SHIPPED["alerts"], SHIPPED["ssh_defaults"])


def test_the_lab_fleet_file_loads_both_pairs_with_the_door_on_the_first_head(tmp_path):
    fleet = load_fleet(_written(tmp_path) / "fleet.yaml")
    assert fleet.name == "lab-fleet"
    assert [(m.name, m.inventory_path.name) for m in fleet.members] == [("lab", "inventory.yaml"), ("lab-2", "inventory-2.yaml")]
    assert (fleet.front_door.member, fleet.front_door.port) == ("lab", 8890)
    assert fleet.front_door_url == "http://10.231.0.11:8890"
    assert (fleet.rollout.max_unavailable, fleet.rollout.stop_on_failure) == (1, True)
    assert fleet.member("lab-2").head_address == "10.231.0.21"
    # the router is shipped from a wheel beside it (the image has only its requirements): this venv's vllm-router
    assert fleet.router_wheel is not None and fleet.router_wheel.parent == tmp_path
    with zipfile.ZipFile(fleet.router_wheel) as z:
        names = set(z.namelist())
    assert {"vllm_router/launch_router.py", "vllm_router_rs.abi3.so"} <= names


def test_a_host_knows_only_its_own_pair_so_its_files_never_change_with_the_other():
    assert [ln.split("\t")[1] for ln in hostfiles.etc_hosts("head").splitlines()[2:]] == ["head", "worker", "offload"]
    assert [ln.split("\t")[1] for ln in hostfiles.etc_hosts("worker2").splitlines()[2:]] == ["head2", "worker2"]


@pytest.mark.parametrize("bad", [0, 3, -1])
def test_a_count_the_lab_cannot_have_is_refused_before_anything_is_touched(bad, tmp_path):
    # Not root (a user namespace without a mapping) and a LAB_DIR of its own: were the count let
    # through, the lab's preflight refuses (needs root) and this machine's lab is never touched.
    cmd = [sys.executable, "-m", "sparkctl", "lab", "up", "--clusters", str(bad)]
    env = {**os.environ, "SPARKCTL_LAB_DIR": str(tmp_path / "lab"), "SPARKCTL_LAB_CACHE": str(tmp_path / "cache")}
    p = subprocess.run(
        ["unshare", "--user", *cmd] if os.geteuid() == 0 else cmd, capture_output=True, text=True, env=env, timeout=60
    )
    assert p.returncode == 2 and p.stdout == "" and "Traceback" not in p.stderr
    assert f"--clusters {bad}" in p.stderr and "1 or 2" in p.stderr and "fix:" in p.stderr
    assert not (tmp_path / "lab").exists()


def test_the_count_is_one_on_a_fresh_lab_and_what_was_saved_after(tmp_path, monkeypatch):
    monkeypatch.setattr(paths, "CLUSTERS_FILE", tmp_path / "clusters")
    assert clusters.count() == 1 and clusters.hosts() is topo.HOSTS
    clusters.save(2)
    assert clusters.count() == 2 and list(clusters.hosts()) == list(topo.ALL_HOSTS)
    (tmp_path / "clusters").write_text("many\n")
    with pytest.raises(SparkctlError, match="not a number of Spark pairs") as err:
        clusters.count()
    assert "--clusters 1" in err.value.fix
    assert clusters.saved() is None  # what `lab up --clusters N` reads: it writes the count again
