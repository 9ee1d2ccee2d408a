"""Fact parsers on command output in the real formats of ip, ping, nvidia-smi and ibdev2netdev (recorded,
or made up where a README beside the file says so)."""

from __future__ import annotations

from ipaddress import IPv4Interface
from pathlib import Path

import yaml

from sparkctl.facts import gpu, network, rdma, system
from sparkctl.facts.probe import build_script, parse_output

REC = Path(__file__).parent / "recorded"


MADE_UP_IP_ADDR = REC / "ip_addr" / "made-up-spark-head-no-twins.json"


def test_ip_addr_interfaces_addresses_mtu_and_carrier():
    ifs = network.parse_ip_addr(MADE_UP_IP_ADDR.read_text())
    fab = ifs["enp1s0f0np0"]
    assert fab.mtu == 9000 and fab.up
    assert fab.addresses == (IPv4Interface("192.168.200.2/24"),)  # IPv6 link-local ignored
    down = ifs["enp1s0f1np1"]
    assert not down.up and down.operstate == "DOWN" and down.addresses == ()


def test_the_made_up_ip_addr_says_so_and_names_the_twins_it_lacks():
    """Labelled for what it is: every Spark has four CX-7 interfaces (NVIDIA's recorded netplan names
    them), this hand-written file two; its README says it is made up and names the two it lacks."""
    spark = set(yaml.safe_load((REC / "netplan" / "40-cx7-static-node1.yaml").read_text())["network"]["ethernets"])
    lacks = spark - set(network.parse_ip_addr(MADE_UP_IP_ADDR.read_text()))
    assert lacks == {"enP2p1s0f0np0", "enP2p1s0f1np1"}
    readme = (MADE_UP_IP_ADDR.parent / "README.md").read_text()
    assert f"`{MADE_UP_IP_ADDR.name}`: **made up, not recorded on a Spark.**" in readme
    assert all(f"`{name}`" in readme for name in lacks)
    assert not list(REC.glob("ip_addr_*.json"))  # no file beside it passes for a recording


def test_ping_ok_and_message_too_long():
    ok = network.parse_ping(0, (REC / "ping_jumbo_ok.txt").read_text())
    assert ok.ok and ok.sent == ok.received == 2
    bad = network.parse_ping(1, (REC / "ping_jumbo_mtu1500.txt").read_text())
    assert not bad.ok and bad.received == 0 and "mtu=1500" in bad.detail


def test_route_get_device():
    assert network.parse_route_get('[{"dst":"192.168.200.3","dev":"enp1s0f0np0","prefsrc":"192.168.200.2"}]') == "enp1s0f0np0"
    assert network.parse_route_get('[{"type":"unreachable","dst":"10.1.1.1"}]') is None
    assert network.parse_route_get("RTNETLINK answers: Network is unreachable") is None


def test_speeds():
    assert network.parse_speeds("enp1s0f0np0 200000\nenP2p1s0f0np0 13000\nenp1s0f1np1 -1\n") == {
        "enp1s0f0np0": 200000,
        "enP2p1s0f0np0": 13000,
        "enp1s0f1np1": None,
    }


def test_nvidia_smi_gb10_has_no_dedicated_memory_figure():
    gpus, err = gpu.parse_gpus(0, (REC / "nvidia_smi_query_gb10.csv").read_text())
    assert err is None and len(gpus) == 1
    assert gpus[0].name == "NVIDIA GB10" and gpus[0].driver == "580.95.05"
    assert gpus[0].memory_total_mib is None


def test_nvidia_smi_offload_two_3090s_and_no_devices():
    gpus, err = gpu.parse_gpus(0, (REC / "nvidia_smi_query_2x3090.csv").read_text())
    assert [g.name for g in gpus] == ["NVIDIA GeForce RTX 3090"] * 2 and gpus[1].memory_total_mib == 24576
    assert gpu.parse_gpus(6, "No devices were found\n") == ([], "No devices were found")
    assert gpu.parse_gpus(127, "sh: nvidia-smi: not found\n")[1] == "sh: nvidia-smi: not found"


def test_ibdev2netdev_and_port_state():
    ports = rdma.parse_ibdev2netdev((REC / "ibdev2netdev_spark.txt").read_text())
    assert ports["rocep1s0f0"].netdev == "enp1s0f0np0" and ports["rocep1s0f0"].link == "Up"
    assert ports["rocep1s0f1"].link == "Down"
    assert rdma.parse_port_states("rocep1s0f0 4: ACTIVE\nrocep1s0f1 1: DOWN\n") == {
        "rocep1s0f0": "ACTIVE",
        "rocep1s0f1": "DOWN",
    }


def test_gid_probe_reads_a_real_sysfs_layout(tmp_path):
    # the probe's shell over a directory shaped like /sys/class/infiniband/DEV/ports/1 (values of the
    # recorded Spark table, tests/unit/recorded/gids/); slot 5 empty, as sysfs leaves a hole
    import subprocess

    port = tmp_path / "rocep1s0f0" / "ports" / "1"
    for sub in ("gids", "gid_attrs/types", "gid_attrs/ndevs"):
        (port / sub).mkdir(parents=True)
    (port / "gids" / "3").write_text("0000:0000:0000:0000:0000:ffff:c0a8:640a\n")
    (port / "gid_attrs" / "types" / "3").write_text("RoCE v2\n")
    (port / "gid_attrs" / "ndevs" / "3").write_text("enp1s0f0np0\n")
    (port / "gids" / "5").write_text("0000:0000:0000:0000:0000:0000:0000:0000\n")
    for index in ("3", "5"):
        value = rdma.gid_probe_value(index).replace("/sys/class/infiniband", str(tmp_path))
        out = subprocess.run(
            ["sh", "-c", f'd=rocep1s0f0; printf "%s %s\\n" "$d" "{value}"'], capture_output=True, text=True
        ).stdout
        e = rdma.parse_gids(out)["rocep1s0f0"]
        if index == "3":
            assert (e.type, str(e.ipv4), e.netdev, e.link_local) == ("RoCE v2", "192.168.100.10", "enp1s0f0np0", False)
        else:
            assert (e.type, e.gid) == ("missing", None)
    fe80 = rdma.parse_gids("rocep1s0f0 IB/RoCE v1|fe80:0000:0000:0000:4ebb:47ff:fee8:9f39|enp1s0f0np0\n")["rocep1s0f0"]
    assert fe80.link_local and fe80.ipv4 is None and fe80.type == "IB/RoCE v1"


def test_system_parsers():
    mem = system.parse_meminfo("MemTotal:       527380000 kB\nMemAvailable:   500000000 kB\nHugePages_Total:       0\n")
    assert mem["MemAvailable"] == 500000000 * 1024 and mem["HugePages_Total"] == 0
    df = system.parse_df(
        "Filesystem 1-blocks Used Available Capacity Mounted on\n/dev/nvme0n1p2 3936818806784 1 1000 1% /\n", ["/var/lib/docker"]
    )
    assert df["/var/lib/docker"].available == 1000 and df["/var/lib/docker"].mount == "/"
    assert system.parse_memlock("unlimited\n") == -1 and system.parse_memlock("8192\n") == 8192
    assert system.parse_remove_ipc("#RemoveIPC=yes\n") is None
    assert system.parse_remove_ipc("RemoveIPC=yes\nRemoveIPC=no\n") is False


def test_probe_script_round_trip_keeps_sections_and_exit_codes():
    import subprocess

    marker = "@@m"
    probes = {"a": "echo one; echo two", "b": "echo err >&2; exit 3", "c": "printf 'x'", "d": "sleep 0.2; echo late"}
    # in the foreground, and run side by side in the background (each section in a file of its own)
    for background in ((), ("b", "c", "d"), tuple(probes)):
        script = build_script(probes, marker, background)
        out = subprocess.run(["sh", "-c", script], capture_output=True, text=True).stdout
        sec = parse_output(out, marker)
        assert sec["a"].out == "one\ntwo\n" and sec["a"].rc == 0, background
        assert sec["b"].rc == 3 and sec["b"].out == "err\n", background
        assert sec["c"].rc == 0 and sec["c"].out == "x", background
        assert sec["d"].rc == 0 and sec["d"].out == "late\n", background
