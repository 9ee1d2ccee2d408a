"""Fabric step plans from recorded `ip -j addr` output: only drift becomes a change."""

from __future__ import annotations

import json
from pathlib import Path

import yaml

from sparkctl.facts.probe import Section
from sparkctl.inventory.models import Inventory
from sparkctl.steps.base import RunContext
from sparkctl.steps.fabric import NETPLAN_PATH, FabricStep, netplan_text

ROOT = Path(__file__).resolve().parents[2]
REC = Path(__file__).parent / "recorded"


def lab_inventory() -> Inventory:
    return Inventory.model_validate(yaml.safe_load((ROOT / "inventories" / "lab.yaml").read_text()))


def ip_addr(**overrides) -> str:
    """The lab head's interfaces as `ip -j addr` prints them, with per-device overrides."""
    devs = {
        "enP7s7": ("10.231.0.11", 24, 1500, True),
        "enp1s0f0np0": ("10.231.100.2", 24, 9000, True),
        "enP2p1s0f0np0": ("10.231.101.2", 24, 9000, True),
        "enp1s0f1np1": ("10.231.110.2", 24, 9000, True),
    }
    devs.update(overrides)
    items = []
    for i, (name, (addr, plen, mtu, up)) in enumerate(devs.items(), start=2):
        flags = ["BROADCAST", "MULTICAST", "UP", "LOWER_UP"] if up else ["BROADCAST", "MULTICAST"]
        info = [{"family": "inet", "local": addr, "prefixlen": plen, "scope": "global", "label": name}] if addr else []
        items.append({"ifindex": i, "ifname": name, "flags": flags, "mtu": mtu, "operstate": "UP" if up else "DOWN",
                      "addr_info": info})  # fmt: skip
    return json.dumps(items)


def ctx_for(inv, ip_json, netplan=None):
    facts = {"ip_addr": Section(0, ip_json), "netplan": Section(0, netplan) if netplan else Section(1, "No such file")}
    return RunContext(inventory=inv, fleet=None, facts={"head": facts})


def test_recorded_real_spark_output_parses_into_a_plan():
    inv = lab_inventory()
    # a real Spark's `ip -j addr` has none of the lab's rails configured: everything is planned
    plan = FabricStep().plan(ctx_for(inv, (REC / "ip_addr_spark_head.json").read_text()), "head")
    assert plan.blocked and "enP2p1s0f0np0 does not exist" in plan.blocked


def test_everything_right_is_an_empty_plan_with_the_reason():
    inv = lab_inventory()
    plan = FabricStep().plan(ctx_for(inv, ip_addr(), netplan_text(inv, "head")), "head")
    assert plan.empty and not plan.blocked
    assert "10.231.100.2/24 MTU 9000 already on enp1s0f0np0" in plan.reason
    assert NETPLAN_PATH in plan.reason


def test_mtu_drift_on_one_rail_is_the_only_change():
    inv = lab_inventory()
    ip = ip_addr(enp1s0f0np0=("10.231.100.2", 24, 1500, True))
    plan = FabricStep().plan(ctx_for(inv, ip, netplan_text(inv, "head")), "head")
    assert [(c.action, c.data.get("device")) for c in plan.changes] == [("set-mtu", "enp1s0f0np0")]
    assert "now 1500" in plan.changes[0].summary


def test_missing_address_and_down_link_and_missing_netplan():
    inv = lab_inventory()
    ip = ip_addr(enP2p1s0f0np0=(None, 0, 9000, False))
    plan = FabricStep().plan(ctx_for(inv, ip), "head")
    assert [c.action for c in plan.changes] == ["link-up", "add-address", "persist"]
    assert plan.changes[1].data == {"device": "enP2p1s0f0np0", "address": "10.231.101.2/24"}


def test_address_on_the_wrong_device_blocks_instead_of_duplicating():
    inv = lab_inventory()
    ip = ip_addr(enP2p1s0f0np0=("10.231.100.2", 24, 9000, True), enp1s0f0np0=(None, 0, 9000, True))
    plan = FabricStep().plan(ctx_for(inv, ip), "head")
    assert plan.blocked and "10.231.100.2 is already on enP2p1s0f0np0" in plan.blocked


def test_netplan_file_lists_every_rail_with_mtu():
    inv = lab_inventory()
    doc = yaml.safe_load(netplan_text(inv, "worker"))
    eth = doc["network"]["ethernets"]
    assert eth["enp1s0f0np0"] == {"dhcp4": False, "dhcp6": False, "addresses": ["10.231.100.3/24"], "mtu": 9000}
    assert set(eth) == {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1"}


def test_probes_ping_every_rail_at_jumbo_size_without_fragmenting():
    probes = FabricStep().probes(lab_inventory(), "offload")
    pings = sorted(v for k, v in probes.items() if k.startswith("ping"))
    assert [p.split(" || ")[0] for p in pings] == [
        "ping -M do -s 8972 -c 1 -W 1 -I enp65s0f0np0 10.231.110.2",
        "ping -M do -s 8972 -c 1 -W 1 -I enp65s0f1np1 10.231.111.3",
    ]
