"""Fabric step plans from recorded `ip -j addr` output, parsed by the fact layer: only drift
becomes an operation, and a rail ends with exactly the inventory's address."""

from __future__ import annotations

import base64
import json

import yaml
from hostfacts import REC, host_facts, inventory, sec

from sparkctl.facts.network import NETPLAN_PATH
from sparkctl.steps.base import RunContext
from sparkctl.steps.fabric import FabricStep, netplan_text

NVIDIA_LINK_LOCAL = (REC / "netplan" / "40-cx7-link-local.yaml").read_text()  # NVIDIA's playbook, verbatim
NVIDIA_STATIC = (REC / "netplan" / "40-cx7-static-node1.yaml").read_text()
CX7 = "/etc/netplan/40-cx7.yaml"
# an IPv4 link-local address as `ip -j addr` shows one (posted `ip addr`: "inet 169.254.152.138/16
# brd 169.254.255.255 scope link eth0")
LINK_LOCAL = {
    "family": "inet",
    "local": "169.254.41.7",
    "prefixlen": 16,
    "broadcast": "169.254.255.255",
    "scope": "link",
    "label": "enp1s0f0np0",
    "valid_life_time": 4294967295,
    "preferred_life_time": 4294967295,
}


def netplan_section(ours: str | None, others: dict[str, str] | None = None) -> str:
    """What the `netplan` probe prints (facts/network.netplan_probe): each file's path and base64."""
    files = ({NETPLAN_PATH: ours} if ours is not None else {}) | (others or {})
    return "".join(f"@@netplan {p}\n{base64.b64encode(t.encode()).decode()}\n" for p, t in sorted(files.items()))


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


def with_link_local(ip_json: str, device: str = "enp1s0f0np0") -> str:
    items = json.loads(ip_json)
    for it in items:
        if it["ifname"] == device:
            it["addr_info"].append(LINK_LOCAL | {"label": device})
    return json.dumps(items)


def plan(ip_json: str, netplan: str | None = None, inv=None, others: dict[str, str] | None = None):
    inv = inv or inventory()
    f = host_facts(inv, "head", ip_addr=sec(ip_json), netplan=sec(netplan_section(netplan, others)))
    ctx = RunContext(inventory=inv, fleet=None, facts={"head": f})
    return FabricStep().plan(ctx)["head"]


def test_a_host_without_a_rails_device_blocks_on_it():
    # made-up `ip -j addr` output without the ports' second PCIe twins (recorded/ip_addr/README.md):
    # the inventory's second rail, enP2p1s0f0np0, does not exist there
    p = plan((REC / "ip_addr" / "made-up-spark-head-no-twins.json").read_text())
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
    assert eth["enp1s0f0np0"] == {
        "dhcp4": False,
        "dhcp6": False,
        "link-local": ["ipv6"],
        "addresses": ["10.231.100.3/24"],
        "mtu": 9000,
    }
    assert set(eth) == {"enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1"}


def test_the_rails_are_proven_by_the_fact_layers_jumbo_ping_on_every_rail():
    from sparkctl.facts.host import probes_for

    probes = probes_for(inventory(), "offload", FabricStep.facts)
    pings = sorted(v for k, v in probes.items() if k.startswith("ping."))
    assert [p.split(" || ")[0] for p in pings] == [
        "ping -M do -s 8972 -c 1 -W 1 -I enp65s0f0np0 10.231.110.2",
        "ping -M do -s 8972 -c 1 -W 1 -I enp65s0f1np1 10.231.111.3",
    ]


# --- NVIDIA's own netplan beside ours: sparkctl takes the rails over ----------------------------------


def test_nvidias_link_local_netplan_is_taken_over_and_its_address_removed():
    # the playbook's 40-cx7.yaml (link-local: [ ipv4 ]) left 169.254.41.7/16 beside our address
    inv = inventory()
    p = plan(with_link_local(ip_addr()), netplan_text(inv, "head"), inv, {CX7: NVIDIA_LINK_LOCAL})
    assert [(c.action, c.data.get("address") or c.data.get("path")) for c in p.changes] == [
        ("del-address", "169.254.41.7/16"),
        ("take-over", CX7),
    ]
    assert p.changes[0].summary == f"remove stray 169.254.41.7/16 from enp1s0f0np0 (IPv4 link-local from {CX7}, taken over below)"
    take = p.changes[1]
    # both of its devices are rails of the lab head: nothing is left, so the file goes (a copy stays)
    assert take.data == {"path": CX7, "text": None, "devices": ["enp1s0f0np0", "enp1s0f1np1"]}
    assert "link-local: [ ipv4 ]" in take.summary and f"kept as {CX7}.bak" in take.summary and "removed" in take.summary


def test_a_taken_over_file_keeps_its_other_devices_and_the_next_plan_is_empty():
    # NVIDIA's static option on node 1 names all four CX-7 interfaces; the lab head uses three of them
    inv = inventory()
    p = plan(ip_addr(), netplan_text(inv, "head"), inv, {CX7: NVIDIA_STATIC})
    (take,) = p.changes
    assert take.action == "take-over" and take.data["devices"] == ["enp1s0f0np0", "enP2p1s0f0np0", "enp1s0f1np1"]
    rest = yaml.safe_load(take.data["text"])
    assert rest == {
        "network": {"version": 2, "ethernets": {"enP2p1s0f1np1": {"addresses": ["192.168.200.16/24"], "dhcp4": False}}}
    }
    assert "its other devices stay" in take.summary
    # after apply the file holds only the device that is not a rail: nothing left to do (idempotent)
    again = plan(ip_addr(), netplan_text(inv, "head"), inv, {CX7: take.data["text"]})
    assert again.empty and not again.blocked


def test_a_link_local_address_netplan_does_not_explain_is_removed_with_a_warning_in_the_plan():
    inv = inventory()
    p = plan(with_link_local(ip_addr()), netplan_text(inv, "head"), inv)
    assert [c.action for c in p.changes] == ["del-address"]
    assert "from outside /etc/netplan: NetworkManager or avahi-autoipd may add it again" in p.changes[0].summary


def test_a_file_naming_a_rail_that_is_not_yaml_blocks_with_the_fix():
    inv = inventory()
    p = plan(ip_addr(), netplan_text(inv, "head"), inv, {CX7: "network:\n  ethernets:\n    enp1s0f0np0: [\n"})
    assert p.blocked and f"{CX7} names a rail but is not valid YAML" in p.blocked and "netplan generate" in p.blocked


def test_the_netplan_probe_reads_ours_and_only_the_files_naming_a_rail(tmp_path):
    # the probe itself, run by sh over a directory laid out like /etc/netplan
    import subprocess

    from sparkctl.facts import network

    (tmp_path / "40-cx7.yaml").write_text(NVIDIA_LINK_LOCAL)
    (tmp_path / "01-network-manager-all.yaml").write_text("network:\n  version: 2\n  renderer: NetworkManager\n")
    (tmp_path / "40-sparkctl-fabric.yaml").write_text("ours\n")
    probe = network.netplan_probe(str(tmp_path / "40-sparkctl-fabric.yaml"), ["enp1s0f0np0", "enP2p1s0f0np0"], str(tmp_path))
    out = subprocess.run(["sh", "-c", probe], capture_output=True, text=True, timeout=10).stdout
    assert network.parse_netplan_files(out) == {
        str(tmp_path / "40-cx7.yaml"): NVIDIA_LINK_LOCAL,
        str(tmp_path / "40-sparkctl-fabric.yaml"): "ours\n",
    }
