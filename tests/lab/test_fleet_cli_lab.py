"""`sparkctl fleet up | status | doctor` on the lab's two pairs (issue 22): the fleet's doctor runs
both members at once and names a fault planted in either member under that member; a second
`fleet up` changes nothing and says so; `fleet status --json` names the front door's URL and both
members serving.

The lab's second pair and the first `fleet up` are shared with the other fleet files
(tests/lab/conftest.py). Timings are printed, never asserted. Cost on the shared 2-core lab: the
no-op `fleet up` ~3 s, status ~3 s, the two doctors ~10 s.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest
from labcli import ENV, HEAD_IP, sparkctl, wait_passing

from sparkctl_lab.paths import FLEET_PATH as FLEET  # this lab's fleet file (a second lab's LAB_DIR differs)

pytestmark = pytest.mark.lab

DOOR_URL = f"http://{HEAD_IP}:8890"  # the fleet file's front door: member lab's head, port 8890
MEMBERS = ["lab", "lab-2"]


@pytest.fixture
def fleet(fleet_lab):
    """The lab's two pairs, every member up: the first `fleet up`'s document (tests/lab/conftest.py)."""
    return fleet_lab


def test_a_second_fleet_up_changes_nothing_and_says_so(fleet):
    assert [m["member"] for m in fleet["members"]] == MEMBERS
    assert fleet["failed"] is False, json.dumps(fleet, indent=1)[-3000:]
    p = subprocess.run([sys.executable, "-m", "sparkctl", "fleet", "up", "-f", str(FLEET)], capture_output=True,
                       text=True, env=ENV, timeout=600)  # fmt: skip
    assert p.returncode == 0, (p.stdout[-3000:], p.stderr[-3000:])
    assert "fleet lab-fleet: nothing to change" in p.stdout
    # progress is on stderr, each line naming its member
    assert any(line.startswith("lab-2: ") for line in p.stderr.splitlines()), p.stderr[-2000:]
    again = sparkctl("fleet", "up", "-f", str(FLEET), "--check")
    assert (again["outcome"], again["changed"]) == ("nothing to change", False)
    assert [m["changed"] for m in again["members"]] == [0, 0]


def test_fleet_status_json_names_the_front_door_url_and_both_members_serving(fleet, tmp_path):
    doc = sparkctl("fleet", "status", "-f", str(FLEET), rc=None)
    (tmp_path / "fleet_status.json").write_text(json.dumps(doc, indent=1))  # a recording for the unit tests
    print(f"\nrecorded: {tmp_path / 'fleet_status.json'}")
    assert doc["front_door_url"] == DOOR_URL
    rows = {m["member"]: m for m in doc["members"]}
    assert list(rows) == MEMBERS
    for name, m in rows.items():
        assert (m["health"], m["inventory_applied"]) == ("serving", True), (name, m["error"])
        assert m["applied_config_hash"] == m["config_hash"]
    assert doc["front_door"]["answering"], doc["front_door"]
    assert {n: m["front_door"] for n, m in rows.items()} == {"lab": "passing", "lab-2": "passing"}
    # the router's own view of each member beside sparkctl's
    assert {n: (r["healthy"], r["circuit"]) for n, r in doc["front_door"]["router"].items()} == {
        "lab": (True, "closed"),
        "lab-2": (True, "closed"),
    }, doc["front_door"]["router"]


def test_fleet_doctor_runs_the_members_at_once_and_names_each_planted_fault_under_its_member(fleet, lab):
    t0 = time.monotonic()
    one = sparkctl("doctor", "-i", str(FLEET.parent / "inventory.yaml"))
    t_one = time.monotonic() - t0
    t0 = time.monotonic()
    healthy = sparkctl("fleet", "doctor", "-f", str(FLEET), rc=None)
    t_fleet = time.monotonic() - t0
    print(f"\none cluster's doctor: {t_one:.1f} s; the 2-pair fleet's doctor: {t_fleet:.1f} s "
          f"(members at once: {healthy['member_seconds']})")  # fmt: skip
    assert one["summary"]["failed"] == 0
    assert list(healthy["members"]) == MEMBERS
    for name in MEMBERS:
        assert healthy["members"][name]["summary"]["failed"] == 0, (name, healthy["members"][name]["summary"])
    same = [c for c in healthy["fleet_checks"] if c["name"] == "fleet.same_model"]
    assert [c["status"] for c in same] == ["ok", "ok"]

    lab.fault("worker2", "link-down", "enp1s0f0np0")  # in member lab-2
    lab.fault("worker", "driver", value="580.82.09")  # in member lab (the head is the reference)
    try:
        faulty = sparkctl("fleet", "doctor", "-f", str(FLEET), "--only", "gpu,fabric", rc=1)
    finally:
        # the fleet is shared with the files after this one (tests/lab/conftest.py): the rail that
        # went down took lab-2's engine with it, and `fleet up` brings it back
        lab.clear_faults()
        sparkctl("fleet", "up", "-f", str(FLEET), rc=None)
        assert wait_passing(lab) == {"lab": "passing", "lab-2": "passing"}

    def failed(member: str) -> set[tuple[str, str]]:
        return {(c["name"], c["host"]) for c in faulty["members"][member]["checks"] if c["status"] == "failed"}

    assert ("fabric.link", "worker2") in failed("lab-2") and not any(n == "fabric.link" for n, _ in failed("lab"))
    assert ("gpu.driver", "worker") in failed("lab") and not any(n == "gpu.driver" for n, _ in failed("lab-2"))
    assert "lab-2: fabric.link" in faulty["summary"]["failed_checks"]
    assert "lab: gpu.driver" in faulty["summary"]["failed_checks"]
