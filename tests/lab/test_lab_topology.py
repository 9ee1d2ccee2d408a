"""The lab's shape: namespaces, links, addresses, routes and the inventory it writes."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

pytestmark = pytest.mark.lab

ROOT = Path(__file__).resolve().parents[2]
REPO_INVENTORY = ROOT / "inventories" / "lab.yaml"


def ip_json(*args: str) -> list:
    return json.loads(subprocess.run(["ip", "-j", *args], capture_output=True, text=True, check=True).stdout)


def test_named_namespaces_exist(lab):
    names = {n["name"] for n in ip_json("netns", "list")}
    assert {"lab-head", "lab-worker", "lab-offload", "lab-switch"} <= names


def test_lab_inventory_is_the_repository_inventory(lab):
    written = yaml.safe_load(lab.INVENTORY_PATH.read_text())
    assert written == yaml.safe_load(REPO_INVENTORY.read_text())


def test_lab_inventory_validates(lab):
    from sparkctl.inventory.models import Inventory

    inv = Inventory.model_validate(yaml.safe_load(lab.INVENTORY_PATH.read_text()))
    assert inv.ssh_target("head").key == lab.SSH_KEY and lab.SSH_KEY.exists()
    assert inv.ssh_target("worker").known_hosts == lab.KNOWN_HOSTS and lab.KNOWN_HOSTS.exists()


def test_every_inventory_link_exists_with_its_address_mtu_and_state(lab):
    inv = yaml.safe_load(REPO_INVENTORY.read_text())
    for name, host in inv["hosts"].items():
        links = {x["ifname"]: x for x in ip_json("-n", f"lab-{name}", "addr", "show")}
        mgmt = [x for x in links.values() if any(a.get("local") == host["ssh"]["address"] for a in x["addr_info"])]
        assert len(mgmt) == 1 and mgmt[0]["mtu"] == 1500, name
        assert mgmt[0]["ifname"] == ("eno1" if name == "offload" else "enP7s7")
        for f in host["fabric"]:
            link = links[f["device"]]
            addrs = [f"{a['local']}/{a['prefixlen']}" for a in link["addr_info"] if a["family"] == "inet"]
            assert addrs == [f["address"]], (name, f["device"])
            assert link["mtu"] == f["mtu"] == 9000
            assert link["operstate"] == "UP"


def test_runner_sits_on_the_management_net_and_the_range_cannot_leak(lab):
    runner = {x["ifname"]: x for x in ip_json("addr", "show")}["lab-mgmt"]
    assert [f"{a['local']}/{a['prefixlen']}" for a in runner["addr_info"] if a["family"] == "inet"] == ["10.231.0.1/24"]
    assert any(r.get("dst") == "10.231.0.0/16" for r in ip_json("route", "show", "type", "unreachable"))
    # the fabric is not reachable from the runner: the unreachable route answers, not a gateway
    r = subprocess.run(["ip", "route", "get", "10.231.100.2"], capture_output=True, text=True)
    assert r.returncode != 0 and "no route to host" in r.stderr.lower()


def test_hosts_have_no_default_route(lab):
    for name in ("head", "worker", "offload"):
        routes = ip_json("-n", f"lab-{name}", "route", "show")
        assert not [r for r in routes if r.get("dst") == "default"], name


def test_status_json_reports_a_healthy_lab(lab):
    r = subprocess.run([sys.executable, "-m", "sparkctl", "lab", "status", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)  # exactly one JSON document
    assert doc["up"] is True
    assert doc["namespaces"] == ["lab-head", "lab-offload", "lab-switch", "lab-worker"]
    for name in ("head", "worker", "offload"):
        h = doc["hosts"][name]
        assert h["init_pid"] and h["sshd"]["healthy"] and h["dockerd"]["healthy"], name
        assert h["dockerd"]["api_version"] == "1.41"
        assert all(ln["present"] and ln["state"] == "up" and ln["mtu"] == ln["expected_mtu"] for ln in h["links"])
    assert doc["registry"]["healthy"] and doc["image"]["present"] and doc["image"]["current"]
    assert doc["runner"]["route_unreachable"] is True
    assert doc["faults"] == []


def test_second_up_changes_nothing_and_says_so(lab):
    lab.up()  # settle first: an edit under sparkctl/lab/sim since the session began means a rebuild
    r = subprocess.run([sys.executable, "-m", "sparkctl", "lab", "up", "--json"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    doc = json.loads(r.stdout)
    assert doc == {"changed": False, "changes": [], "seconds": doc["seconds"]}
    r = subprocess.run([sys.executable, "-m", "sparkctl", "lab", "up"], capture_output=True, text=True)
    assert "nothing changed" in r.stdout
