"""The lab's second Spark pair (`sparkctl lab up --clusters 2`): it serves from its own inventory, the
lab's status shows all five hosts, and it takes faults like the first pair.

The first of the files that share the pair (tests/lab/conftest.py second_pair; tests/conftest.py
RUN_LAST orders them after every other lab test): the fleet files come after it, and
test_lab_pair_removal.py takes the pair away. Cost on the shared 2-core machine: ~18 s (adding the
pair ~1.5 s, `sparkctl up` of the pair with its image pull ~16 s).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from labcli import ENV, lab_cli, sparkctl

from sparkctl_lab.paths import PREFIX
from sparkctl_lab.topology import net

pytestmark = pytest.mark.lab

PAIR = ("head2", "worker2")


def _netns_inode(name: str) -> int | None:
    try:
        return os.stat(f"/run/netns/{name}").st_ino
    except FileNotFoundError:
        return None


def _pids_in(inodes: set[int]) -> list[int]:
    """Every live process whose network namespace is one of `inodes` (named or not any more)."""
    found = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            ino = os.stat(f"/proc/{pid}/ns/net").st_ino
            state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if ino in inodes and state not in ("Z", "X"):
            found.append(int(pid))
    return found


def _cgroups(name: str) -> list[str]:
    return [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/**/sparkctl-{PREFIX}-{name}")]


@pytest.fixture
def two_pairs(lab, second_pair):
    """The lab with its second pair (tests/lab/conftest.py: shared with the fleet files after this one;
    test_lab_pair_removal.py takes it away)."""
    return lab, second_pair


def test_the_second_pair_serves_from_its_own_inventory(two_pairs):
    lab, doc = two_pairs
    assert doc["changed"] and "hosts started: head2, worker2" in doc["changes"]
    assert lab.clusters() == 2 and list(lab.hosts()) == ["head", "worker", "offload", "head2", "worker2"]
    assert lab.up()["changed"] is False and lab.clusters() == 2  # a plain `lab up` keeps both pairs
    inv2 = str(lab.INVENTORY_2_PATH)
    p = subprocess.run([sys.executable, "-m", "sparkctl", "inventory", "validate", inv2], capture_output=True, text=True, env=ENV)
    assert p.returncode == 0 and "cluster lab-2" in p.stdout, p.stderr
    assert lab.FLEET_PATH.exists()

    up = sparkctl("up", "-i", inv2)
    assert up["failed"] == 0 and set(up["hosts"]) == set(PAIR)
    assert f"serving at http://{net(0, 21)}:8888/gateway/engine" in up["hosts"]["head2"]["runtime"]["message"]
    r = httpx.post(
        f"http://{net(0, 21)}:8888/v1/completions",
        json={"model": "deepseek-v4.1-flash", "prompt": "The second pair says", "max_tokens": 8},
        timeout=60,
        trust_env=False,
    )
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["text"]
    # the first pair's hosts know nothing of the second (their own files never change with it)
    assert "head2" not in lab.host_exec("head", ["cat", "/etc/hosts"]).stdout


def test_the_lab_status_lists_all_five_hosts(two_pairs):
    lab, _ = two_pairs
    doc = lab_cli("status")
    assert doc["up"] is True and doc["clusters"] == 2
    assert list(doc["hosts"]) == ["head", "worker", "offload", "head2", "worker2"]
    assert all(h["healthy"] for h in doc["hosts"].values())
    assert {f"{PREFIX}-head2", f"{PREFIX}-worker2"} <= set(doc["namespaces"])
    assert (doc["inventory_2"], doc["fleet"]) == (str(lab.INVENTORY_2_PATH), str(lab.FLEET_PATH))
    assert [ln["address"] for ln in doc["hosts"]["worker2"]["links"]] == [
        f"{net(0, 22)}/24",
        f"{net(102, 3)}/24",
        f"{net(103, 3)}/24",
    ]
    assert all(ln["present"] and ln["state"] == "up" for ln in doc["hosts"]["worker2"]["links"])
    known = lab.KNOWN_HOSTS.read_text()
    assert f"head2,{net(0, 21)}," in known and f"worker2,{net(0, 22)}," in known


def test_the_second_pair_takes_faults_like_the_first(two_pairs):
    lab, _ = two_pairs
    assert lab.host_exec("head2", ["hostname"]).stdout.strip() == "head2"
    try:
        lab.fault("worker2", "link-down", "enp1s0f0np0")
        assert "worker2: link-down enp1s0f0np0" in lab.status()["faults"]
        # the simulated tools of a second-pair host read its own links
        assert "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)" in lab.host_exec("worker2", ["ibdev2netdev"]).stdout
    finally:
        lab.clear_faults()
    assert lab.status()["faults"] == []
    up = "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)"  # the veth's carrier comes back a moment after the link
    deadline = time.monotonic() + 10
    while up not in (seen := lab.host_exec("worker2", ["ibdev2netdev"]).stdout) and time.monotonic() < deadline:
        time.sleep(0.2)
    assert up in seen
