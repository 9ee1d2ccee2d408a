"""Two labs on one machine, on paper: the second lab (SPARKCTL_LAB_INSTANCE=1, what `./dev.sh test`
runs half the lab tests on) is the first one's shape with nothing of its own in common with it:
namespaces, addresses, runner device, registry, LAB_DIR, cgroups, test lock. Each lab is read in a
process of its own (the instance is fixed when sparkctl_lab.paths is imported). No lab needed."""

from __future__ import annotations

import ipaddress
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]

DUMP = r"""
import json, sys, tempfile, yaml
from sparkctl.inventory.loader import load_inventory
from sparkctl_lab import hostfiles, paths, topology as topo
doc = topo.inventory_doc(str(paths.SSH_KEY), str(paths.KNOWN_HOSTS))
with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
    yaml.safe_dump(doc, f)
inv = load_inventory(f.name)  # the inventory that lab writes is a valid one
sys.path.insert(0, "tests")
import conftest
print(json.dumps({
    "lab_dir": str(paths.LAB_DIR), "subnet": topo.SUBNET, "runner": [topo.RUNNER_DEVICE, topo.RUNNER_ADDRESS],
    "registry": topo.REGISTRY, "image": inv.runtime.image, "netns": topo.ALL_NETNS,
    "addresses": sorted(a for h in topo.ALL_HOSTS.values() for a in h.addresses),
    "ssh": {n: h.ssh.address for n, h in inv.hosts.items()},
    "cgroup": json.loads(hostfiles.daemon_json("head"))["cgroup-parent"],
    "lock": conftest.LAB_SESSION_LOCK,
}))
"""


def lab_of(instance: str | None) -> subprocess.CompletedProcess:
    env = {k: v for k, v in os.environ.items() if k not in ("SPARKCTL_LAB_INSTANCE", "SPARKCTL_LAB_DIR")}
    if instance is not None:
        env["SPARKCTL_LAB_INSTANCE"] = instance
    return subprocess.run([sys.executable, "-c", DUMP], capture_output=True, text=True, env=env, cwd=REPO, timeout=60)


@pytest.fixture(scope="module")
def labs() -> tuple[dict, dict]:
    first, second = lab_of(None), lab_of("1")
    assert first.returncode == 0 and second.returncode == 0, first.stderr + second.stderr
    return json.loads(first.stdout), json.loads(second.stdout)


def test_the_first_lab_is_the_lab_a_newcomer_has_always_had(labs):
    first, _ = labs
    assert first["lab_dir"] == "/var/lib/sparkctl-lab" and first["subnet"] == "10.231.0.0/16"
    assert first["runner"] == ["lab-mgmt", "10.231.0.1"] and first["registry"] == "10.231.0.1:5000"
    assert first["image"] == "10.231.0.1:5000/sparkctl/vllm-sim:0.1"
    assert first["ssh"] == {"head": "10.231.0.11", "worker": "10.231.0.12", "offload": "10.231.0.13"}
    assert first["netns"][:4] == ["lab-switch", "lab-head", "lab-worker", "lab-offload"]
    assert first["cgroup"] == "sparkctl-lab-head" and first["lock"] == "/run/lock/sparkctl-lab-tests.lock"


def test_the_second_lab_shares_nothing_with_the_first(labs):
    first, second = labs
    for key in ("lab_dir", "runner", "registry", "image", "cgroup", "lock"):
        assert first[key] != second[key], key
    assert not set(first["netns"]) & set(second["netns"]) and all(n.startswith("lab1-") for n in second["netns"])
    assert not set(first["addresses"]) & set(second["addresses"])
    # its image is the same one, from its own registry; its hosts keep their names
    assert second["image"] == f"{second['registry']}/sparkctl/vllm-sim:0.1"
    assert set(second["ssh"]) == set(first["ssh"])


def test_each_lab_stays_in_its_own_range_inside_what_the_fence_allows(labs):
    first, second = labs
    fence = ipaddress.ip_network("10.231.0.0/16")
    own = ipaddress.ip_network(second["subnet"])
    assert own == ipaddress.ip_network("10.231.128.0/17") and own.subnet_of(fence)
    for a in second["addresses"] + list(second["ssh"].values()) + [second["runner"][1]]:
        assert ipaddress.ip_address(a) in own, a
    for a in first["addresses"] + [first["runner"][1]]:
        assert ipaddress.ip_address(a) in fence and ipaddress.ip_address(a) not in own, a


def test_an_instance_the_machine_cannot_have_is_refused_naming_the_variable():
    r = lab_of("2")
    assert r.returncode != 0 and "SPARKCTL_LAB_INSTANCE='2'" in r.stderr and "Traceback" not in r.stderr
