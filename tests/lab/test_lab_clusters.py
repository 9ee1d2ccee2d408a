"""The lab's second Spark pair (`sparkctl lab up --clusters 2`): it serves from its own inventory, the
lab's status shows all five hosts, and `--clusters 1` takes every trace of it away again.

Ordered after every other lab test but before test_lab_updown.py (tests/conftest.py RUN_LAST): the
rest of the suite sees the one-pair lab, and whatever happens here, the module's teardown returns
the lab to one pair. Cost on the shared 2-core machine: ~22 s of lab time after the other tests
(adding the pair ~1.5 s, `sparkctl up` of the pair with its image pull ~16 s, the removal ~4 s);
~42 s run alone, the session's lab fixture included.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from labcli import ENV, sparkctl

pytestmark = pytest.mark.lab

PAIR = ("head2", "worker2")
LAB = [sys.executable, "-m", "sparkctl", "lab"]


def lab_cli(*args: str, rc: int = 0) -> dict:
    p = subprocess.run([*LAB, *args, "--json"], capture_output=True, text=True, env=ENV, timeout=600)
    assert "Traceback" not in p.stderr, p.stderr
    assert p.returncode == rc, (p.returncode, p.stdout[-3000:], p.stderr[-3000:])
    return json.loads(p.stdout)


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
            state = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            continue
        if ino in inodes and state not in ("Z", "X"):
            found.append(int(pid))
    return found


def _cgroups(name: str) -> list[str]:
    return [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/**/sparkctl-lab-{name}")]


@pytest.fixture(scope="module")
def two_pairs(lab):
    """The lab with its second pair; back to one pair at the end, whatever happened."""
    try:
        doc = lab_cli("up", "--clusters", "2")
        yield lab, doc
    finally:
        lab.up(clusters=1)
        assert lab.clusters() == 1 and lab.status()["up"]


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
    assert "serving at http://10.231.0.21:8001" in up["hosts"]["head2"]["runtime"]["message"]
    r = httpx.post(
        "http://10.231.0.21:8888/v1/completions",
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
    assert {"lab-head2", "lab-worker2"} <= set(doc["namespaces"])
    assert (doc["inventory_2"], doc["fleet"]) == (str(lab.INVENTORY_2_PATH), str(lab.FLEET_PATH))
    assert [ln["address"] for ln in doc["hosts"]["worker2"]["links"]] == ["10.231.0.22/24", "10.231.102.3/24", "10.231.103.3/24"]
    assert all(ln["present"] and ln["state"] == "up" for ln in doc["hosts"]["worker2"]["links"])
    known = lab.KNOWN_HOSTS.read_text()
    assert "head2,10.231.0.21," in known and "worker2,10.231.0.22," in known


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


def test_one_cluster_again_leaves_nothing_of_the_second_pair(two_pairs):
    lab, _ = two_pairs
    inodes = {i for i in map(_netns_inode, ("lab-head2", "lab-worker2")) if i}
    assert len(inodes) == 2 and _pids_in(inodes)  # its hosts run (and the runtime sparkctl started)
    assert any(_cgroups(h) for h in PAIR)  # its dockerd made cgroups for the containers
    dirs = [lab.LAB_DIR / "hosts" / h for h in PAIR]

    doc = lab_cli("up", "--clusters", "1")
    said = " ".join(doc["changes"])
    assert "second pair removed (head2, worker2)" in said and "clusters 2 -> 1" in said
    assert _pids_in(inodes) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert "lab-head2" not in netns and "lab-worker2" not in netns
    ports = subprocess.run(["ip", "-n", "lab-switch", "-br", "link"], capture_output=True, text=True).stdout
    assert "sw-head2" not in ports and "sw-worker2" not in ports
    assert [c for h in PAIR for c in _cgroups(h)] == []
    assert [ln for ln in open("/proc/self/mountinfo") if any(str(d) in ln for d in dirs)] == []
    gone = [*dirs, lab.INVENTORY_2_PATH, lab.FLEET_PATH, *(lab.LAB_DIR / "faults" / f"{h}.json" for h in PAIR)]
    assert [str(p) for p in gone if p.exists()] == []
    assert "head2" not in lab.KNOWN_HOSTS.read_text() and "head2" not in lab.SSH_CONFIG.read_text()

    status = lab_cli("status")
    assert status["up"] and status["clusters"] == 1 and list(status["hosts"]) == ["head", "worker", "offload"]
    assert lab.up()["changed"] is False  # and a plain `lab up` now keeps one pair
