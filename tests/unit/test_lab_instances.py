"""Three labs on one machine, on paper: the second and third (SPARKCTL_LAB_INSTANCE=1 and 2, what
`./dev.sh test` runs two thirds of the lab tests on) are the first one's shape with nothing of their
own in common with it or each other: namespaces, addresses, runner device, registry, LAB_DIR,
cgroups, test lock. Each lab is read in a process of its own (the instance is fixed when
sparkctl_lab.paths is imported). No lab needed."""

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
    "lab_dir": str(paths.LAB_DIR), "subnets": topo.SUBNETS, "stray": topo.net(1, 0), "runner": [topo.RUNNER_DEVICE, topo.RUNNER_ADDRESS],
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
def labs() -> list[dict]:
    runs = [lab_of(None), lab_of("1"), lab_of("2")]
    assert all(r.returncode == 0 for r in runs), "".join(r.stderr for r in runs)
    return [json.loads(r.stdout) for r in runs]


def test_the_first_lab_is_the_lab_a_newcomer_has_always_had(labs):
    first = labs[0]
    assert first["lab_dir"] == "/var/lib/sparkctl-lab" and first["subnets"] == ["10.231.0.0/16"]
    assert first["runner"] == ["lab-mgmt", "10.231.0.1"] and first["registry"] == "10.231.0.1:5000"
    assert first["image"] == "10.231.0.1:5000/sparkctl/vllm-sim:0.1"
    assert first["ssh"] == {"head": "10.231.0.11", "worker": "10.231.0.12", "offload": "10.231.0.13"}
    assert first["netns"][:4] == ["lab-switch", "lab-head", "lab-worker", "lab-offload"]
    assert first["cgroup"] == "sparkctl-lab-head" and first["lock"] == "/run/lock/sparkctl-lab-tests.lock"


@pytest.mark.parametrize("other", [1, 2])
def test_the_other_labs_share_nothing_with_the_first_or_each_other(labs, other):
    lab = labs[other]
    for i, them in enumerate(labs):
        if i == other:
            continue
        for key in ("lab_dir", "runner", "registry", "image", "cgroup", "lock"):
            assert them[key] != lab[key], (i, key)
        assert not set(them["netns"]) & set(lab["netns"]), i
        assert not set(them["addresses"]) & set(lab["addresses"]), i
    assert all(n.startswith(f"lab{other}-") for n in lab["netns"])
    # its image is the same one, from its own registry; its hosts keep their names
    assert lab["image"] == f"{lab['registry']}/sparkctl/vllm-sim:0.1"
    assert set(lab["ssh"]) == set(labs[0]["ssh"])


def _inside(address: str, subnets: list[str]) -> bool:
    return any(ipaddress.ip_address(address) in ipaddress.ip_network(s) for s in subnets)


def test_each_lab_stays_in_its_own_range_inside_what_the_fence_allows(labs):
    fence = ipaddress.ip_network("10.231.0.0/16")
    assert labs[1]["subnets"] == ["10.231.128.0/17"]
    assert labs[2]["subnets"] == ["10.231.16.0/20", "10.231.112.0/20"]
    for i, lab in enumerate(labs):
        assert all(ipaddress.ip_network(s).subnet_of(fence) for s in lab["subnets"])
        mine = lab["addresses"] + list(lab["ssh"].values()) + [lab["runner"][1], lab["stray"]]
        for a in mine:
            assert _inside(a, lab["subnets"]), (i, a)
            # and outside the others' own (more specific) prefixes: the first lab's /16 holds them all
            assert not any(_inside(a, o["subnets"]) for o in labs[1:] if o is not lab), (i, a)


def test_an_instance_the_machine_cannot_have_is_refused_naming_the_variable():
    r = lab_of("3")
    assert r.returncode != 0 and "SPARKCTL_LAB_INSTANCE='3'" in r.stderr and "Traceback" not in r.stderr


def test_a_route_in_another_labs_range_is_that_labs_and_one_in_ours_is_refused():
    """`lab up`'s range check (netns.foreign): the first lab's /16 holds the other labs' ranges, so a
    route test_lab_updown plants inside lab 2's range must not stop lab 0 coming up beside it (ci30)."""
    from sparkctl_lab.netns import foreign
    from sparkctl_lab.topology import SUBNETS_OF

    # `ip -j route show table all` as Debian 12's iproute2 prints these routes (made up: their shape)
    routes = [
        {"type": "blackhole", "dst": "10.231.17.0/24", "flags": []},  # inside lab 2's 10.231.16.0/20
        {"type": "blackhole", "dst": "10.231.129.0/24", "flags": []},  # inside lab 1's 10.231.128.0/17
        {"dst": "10.231.0.0/24", "dev": "lab-mgmt", "protocol": "kernel", "scope": "link", "flags": []},  # a runner's
        {"type": "unreachable", "dst": "10.231.16.0/20", "flags": []},  # a lab's own
        {"dst": "default", "gateway": "172.17.0.1", "dev": "eth0", "flags": []},
    ]
    devices = ("lab-mgmt", "lab1-mgmt", "lab2-mgmt")
    every = tuple(s for own in SUBNETS_OF for s in own)
    assert foreign(routes, SUBNETS_OF[0], every, devices) == []
    assert foreign(routes, SUBNETS_OF[1], every, devices) == ["blackhole 10.231.129.0/24"]
    assert foreign(routes, SUBNETS_OF[2], every, devices) == ["blackhole 10.231.17.0/24"]
    # a route over the whole /16 is in every lab's way
    whole = [{"type": "blackhole", "dst": "10.231.0.0/16", "flags": []}]
    assert all(foreign(whole, own, every, devices) == ["blackhole 10.231.0.0/16"] for own in SUBNETS_OF)
