"""drills.changes(): what a drill left changed in the lab, one line per difference (the drills'
teardown fails with these lines). The snapshots are the shape drills.snapshot() returns, taken
from the lab (head and worker only: the offload host adds nothing new)."""

from __future__ import annotations

import copy

from sparkctl_lab import drills

IMAGE = "sha256:40a66acbd4699349317a02d89e3e0f9974043221f77c9fdad032f2f4c4448a81"
LAB = {
    "head": {
        "links": {"enP7s7": ["UP", 1500, ["10.231.0.11/24"]], "enp1s0f0np0": ["UP", 9000, ["10.231.100.2/24"]]},
        "containers": [f"/sparkctl-head running {IMAGE} 4be7e927bcc5ff9f"],
        "image": IMAGE,
        "lock, journal, engram mount": [],
    },
    "worker": {
        "links": {"enP7s7": ["UP", 1500, ["10.231.0.12/24"]], "enp1s0f0np0": ["UP", 9000, ["10.231.100.3/24"]]},
        "containers": [f"/sparkctl-worker running {IMAGE} 4be7e927bcc5ff9f"],
        "image": IMAGE,
        "lock, journal, engram mount": [],
    },
    "drill loads": [],
}


def test_the_same_lab_has_no_changes():
    assert drills.changes(LAB, copy.deepcopy(LAB)) == []


def test_each_change_is_named_with_its_host_and_what_it_was():
    after = copy.deepcopy(LAB)
    after["worker"]["links"]["enp1s0f0np0"] = ["UP", 1500, ["10.231.100.3/24"]]  # a rail left at MTU 1500
    after["head"]["containers"] = [f"/sparkctl-head running {IMAGE} 0123456789abcdef"]  # another config serving
    after["head"]["lock, journal, engram mount"] = ["/var/lib/sparkctl/state/lock"]
    after["drill loads"] = ["load-chat.pid"]
    lines = drills.changes(LAB, after)
    assert len(lines) == 4, lines
    assert "worker links enp1s0f0np0: ['UP', 9000, ['10.231.100.3/24']] -> ['UP', 1500, ['10.231.100.3/24']]" in lines
    assert any(line.startswith("head containers: ") and "0123456789abcdef" in line for line in lines)
    assert any(line.startswith("head lock, journal, engram mount: ") for line in lines)
    assert "drill loads: [] -> ['load-chat.pid']" in lines
