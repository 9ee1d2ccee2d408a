"""Fabric step plans from recorded `ip -j addr` output, parsed by the fact layer: only drift
becomes an operation, and a rail ends with exactly the inventory's address."""

from __future__ import annotations

import json

import yaml
from hostfacts import REC, host_facts, inventory, sec

from sparkctl.facts.host import NETPLAN_PATH
from sparkctl.steps.base import RunContext
from sparkctl.steps.fabric import FabricStep, netplan_text


def ip_addr(**overrides) -> str:
    """The lab head's interfaces as `ip -j addr` prints them, with per-device overrides
    (a device maps to (address or list of addresses, prefix, mtu, up))."""
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
        addrs = [] if addr is None else (addr if isinstance(addr, list) else [addr])
        info = [{"family": "inet", "local": a, "prefixlen": plen, "scope": "global", "label": name} for a in addrs]
        items.append({"ifindex": i, "ifname": name, "flags": flags, "mtu": mtu, "operstate": "UP" if up else "DOWN",
                      "addr_info": info})  # fmt: skip
    return json.dumps(items)


def plan(ip_json: str, netplan: str | None = None, inv=None):
    inv = inv or inventory()
    f = host_facts(inv, "head", ip_addr=sec(ip_json), netplan=sec(netplan) if netplan else sec("No such file", 1))
    ctx = RunContext(inventory=inv, fleet=None, facts={"head": f})
    return FabricStep().plan(ctx)["head"]


def test_recorded_real_spark_output_blocks_on_a_missing_rail():
    # a real Spark's `ip -j addr` (recorded): the lab's second rail name does not exist there
    p = plan((REC / "ip_addr_spark_head.json").read_text())
    assert p.blocked and "enP2p1s0f0np0 does not exist" in p.blocked


def test_everything_right_is_an_empty_plan_with_the_reason():
    inv = inventory()
    p = plan(ip_addr(), netplan_text(inv, "head"), inv)
    assert p.empty and not p.blocked
    assert "10.231.100.2/24 MTU 9000 already on enp1s0f0np0" in p.reason and NETPLAN_PATH in p.reason


def test_mtu_drift_on_one_rail_is_the_only_operation():
    inv = inventory()
    p = plan(ip_addr(enp1s0f0np0=("10.231.100.2", 24, 1500, True)), netplan_text(inv, "head"), inv)
    assert [(c.action, c.data.get("device")) for c in p.changes] == [("set-mtu", "enp1s0f0np0")]
    assert "now 1500" in p.changes[0].summary


def test_missing_address_down_link_and_missing_netplan():
    p = plan(ip_addr(enP2p1s0f0np0=(None, 0, 9000, False)))
    assert [c.action for c in p.changes] == ["link-up", "add-address", "persist"]
    assert p.changes[1].data == {"device": "enP2p1s0f0np0", "address": "10.231.101.2/24"}


def test_wrong_address_is_removed_before_the_right_one_is_added():
    # a wrong IP on a rail: left in place it would stay primary, the source of the rail's traffic
    inv = inventory()
    p = plan(ip_addr(enp1s0f0np0=("10.231.100.9", 24, 9000, True)), netplan_text(inv, "head"), inv)
    assert [(c.action, c.data["address"]) for c in p.changes] == [
        ("del-address", "10.231.100.9/24"),
        ("add-address", "10.231.100.2/24"),
    ]
    assert "not in the inventory" in p.changes[0].summary


def test_a_peers_address_on_a_rail_is_named_and_removed():
    inv = inventory()
    p = plan(ip_addr(enp1s0f0np0=(["10.231.100.2", "10.231.100.3"], 24, 9000, True)), netplan_text(inv, "head"), inv)
    assert [c.action for c in p.changes] == ["del-address"]
    assert "remove stray 10.231.100.3/24 from enp1s0f0np0 (worker's address)" == p.changes[0].summary


def test_address_moved_to_another_rail_is_moved_back():
    inv = inventory()
    ip = ip_addr(enP2p1s0f0np0=(["10.231.101.2", "10.231.100.2"], 24, 9000, True), enp1s0f0np0=(None, 0, 9000, True))
    p = plan(ip, netplan_text(inv, "head"), inv)
    ops = [(c.action, c.data["device"], c.data["address"]) for c in p.changes]
    assert ops == [
        ("del-address", "enP2p1s0f0np0", "10.231.100.2/24"),  # once: as the moved address, not also as a stray
        ("add-address", "enp1s0f0np0", "10.231.100.2/24"),
    ]


def test_address_held_by_a_device_that_is_not_a_rail_is_refused_with_the_fix():
    p = plan(ip_addr(enP7s7=(["10.231.0.11", "10.231.100.2"], 24, 1500, True), enp1s0f0np0=(None, 0, 9000, True)))
    assert p.blocked and "10.231.100.2 is on enP7s7, which is not a fabric rail" in p.blocked
    assert "ip addr del 10.231.100.2/24 dev enP7s7" in p.blocked


def test_netplan_file_lists_every_rail_with_mtu():
    doc = yaml.safe_load(netplan_text(inventory(), "worker"))
    eth = doc["network"]["ethernets"]
    assert eth["enp1s0f0np0"] == {"dhcp4": False, "dhcp6": False, "addresses": ["10.231.100.3/24"], "mtu": 9000}
    assert set(eth) == {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1"}


def test_the_rails_are_proven_by_the_fact_layers_jumbo_ping_on_every_rail():
    from sparkctl.facts.host import probes_for

    probes = probes_for(inventory(), "offload", FabricStep.facts)
    pings = sorted(v for k, v in probes.items() if k.startswith("ping."))
    assert [p.split(" || ")[0] for p in pings] == [
        "ping -M do -s 8972 -c 1 -W 1 -I enp65s0f0np0 10.231.110.2",
        "ping -M do -s 8972 -c 1 -W 1 -I enp65s0f1np1 10.231.111.3",
    ]
