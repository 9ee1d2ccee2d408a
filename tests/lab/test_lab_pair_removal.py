"""`sparkctl lab up --clusters 1` takes every trace of the lab's second pair away: its processes,
namespaces, switch ports, cgroups, mounts, files, and its hosts in the runner's SSH files.

The last of the files that share the pair (tests/lab/conftest.py second_pair), after the fleet's;
~4 s.
"""

from __future__ import annotations

import subprocess

import pytest
from labcli import lab_cli
from test_lab_clusters import PAIR, _cgroups, _netns_inode, _pids_in

from sparkctl_lab.paths import PREFIX

pytestmark = pytest.mark.lab


def test_one_cluster_again_leaves_nothing_of_the_second_pair(lab, second_pair):
    inodes = {i for i in map(_netns_inode, (f"{PREFIX}-head2", f"{PREFIX}-worker2")) if i}
    assert len(inodes) == 2 and _pids_in(inodes)  # its hosts run (and the runtime sparkctl started)
    assert any(_cgroups(h) for h in PAIR)  # its dockerd made cgroups for the containers
    dirs = [lab.LAB_DIR / "hosts" / h for h in PAIR]

    doc = lab_cli("up", "--clusters", "1")
    said = " ".join(doc["changes"])
    assert "second pair removed (head2, worker2)" in said and "clusters 2 -> 1" in said
    assert _pids_in(inodes) == []
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    assert f"{PREFIX}-head2" not in netns and f"{PREFIX}-worker2" not in netns
    ports = subprocess.run(["ip", "-n", f"{PREFIX}-switch", "-br", "link"], capture_output=True, text=True).stdout
    assert "sw-head2" not in ports and "sw-worker2" not in ports
    assert [c for h in PAIR for c in _cgroups(h)] == []
    assert [ln for ln in open("/proc/self/mountinfo") if any(str(d) in ln for d in dirs)] == []
    gone = [*dirs, lab.INVENTORY_2_PATH, lab.FLEET_PATH, *(lab.LAB_DIR / "faults" / f"{h}.json" for h in PAIR)]
    assert [str(p) for p in gone if p.exists()] == []
    assert "head2" not in lab.KNOWN_HOSTS.read_text() and "head2" not in lab.SSH_CONFIG.read_text()

    status = lab_cli("status")
    assert status["up"] and status["clusters"] == 1 and list(status["hosts"]) == ["head", "worker", "offload"]
    assert lab.up()["changed"] is False  # and a plain `lab up` now keeps one pair
