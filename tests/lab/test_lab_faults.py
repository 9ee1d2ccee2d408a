"""Each fault flips what the hosts' tools report, and clearing restores it."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from sparkctl_lab.topology import ALL_HOSTS

pytestmark = pytest.mark.lab


def out(lab, host: str, cmd: str) -> str:
    return lab.host_exec(host, ["sh", "-c", cmd]).stdout


def eventually(fn, timeout: float = 3.0):
    """Link changes reach the simulated sysfs through a netlink watcher: allow it a moment."""
    deadline = time.monotonic() + timeout
    while True:
        value = fn()
        if value or time.monotonic() > deadline:
            return value
        time.sleep(0.05)


def rdma_state(lab, host: str, rdma: str) -> str:
    return out(lab, host, f"cat /sys/class/infiniband/{rdma}/ports/1/state").strip()


def test_link_down_by_hand_is_seen_on_both_ends(lab_faults):
    lab = lab_faults
    subprocess.run(["ip", "-n", "lab-worker", "link", "set", "enp1s0f0np0", "down"], check=True)
    assert eventually(lambda: rdma_state(lab, "worker", "rocep1s0f0") == "1: DOWN")
    assert eventually(lambda: rdma_state(lab, "head", "rocep1s0f0") == "1: DOWN")  # carrier lost at the peer
    assert "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)" in out(lab, "worker", "ibdev2netdev")
    assert "rocep1s0f0 port 1 ==> enp1s0f0np0 (Down)" in out(lab, "head", "ibdev2netdev")
    assert "Link detected: no" in out(lab, "head", "ethtool enp1s0f0np0")
    assert lab.host_exec("head", ["ping", "-c", "1", "-W", "1", "10.231.100.3"]).returncode != 0
    # the other twin still works
    assert lab.host_exec("head", ["ping", "-c", "1", "-W", "1", "10.231.101.3"]).returncode == 0
    assert any("link-down enp1s0f0np0" in f for f in lab.status()["faults"])
    subprocess.run(["ip", "-n", "lab-worker", "link", "set", "enp1s0f0np0", "up"], check=True)
    assert eventually(lambda: rdma_state(lab, "head", "rocep1s0f0") == "4: ACTIVE")
    assert eventually(lambda: rdma_state(lab, "worker", "rocep1s0f0") == "4: ACTIVE")


def test_link_down_fault_and_clear(lab_faults):
    lab = lab_faults
    lab.fault("head", "link-down", "enP2p1s0f0np0")
    assert rdma_state(lab, "head", "roceP2p1s0f0") == "1: DOWN"  # the API waits for nothing: it syncs
    assert "(Down)" in out(lab, "head", "ibdev2netdev | grep enP2p1s0f0np0")
    lab.fault("head", "link-down", "enP2p1s0f0np0", clear=True)
    assert eventually(lambda: rdma_state(lab, "head", "roceP2p1s0f0") == "4: ACTIVE")


def test_wrong_mtu_breaks_jumbo_frames_and_clear_all_restores(lab_faults):
    lab = lab_faults
    lab.fault("worker", "mtu", "enp1s0f0np0")  # 1500
    assert (
        "mtu 1500"
        in subprocess.run(["ip", "-n", "lab-worker", "link", "show", "enp1s0f0np0"], capture_output=True, text=True).stdout
    )
    jumbo = ["ping", "-c", "1", "-W", "1", "-M", "do", "-s", "8972", "10.231.100.3"]
    assert lab.host_exec("head", jumbo).returncode != 0
    assert any("mtu enp1s0f0np0=1500" in f for f in lab.status()["faults"])
    lab.clear_faults()
    assert lab.host_exec("head", jumbo).returncode == 0


def test_mtu_changed_by_hand_is_reported(lab_faults):
    lab = lab_faults
    subprocess.run(["ip", "-n", "lab-offload", "link", "set", "enp65s0f1np1", "mtu", "1500"], check=True)
    links = {ln["device"]: ln for ln in lab.status()["hosts"]["offload"]["links"]}
    assert links["enp65s0f1np1"]["mtu"] == 1500 and links["enp65s0f1np1"]["expected_mtu"] == 9000
    lab.clear_faults()
    links = {ln["device"]: ln for ln in lab.status()["hosts"]["offload"]["links"]}
    assert links["enp65s0f1np1"]["mtu"] == 9000


def qdisc(host: str, dev: str) -> str:
    return subprocess.run(["tc", "-n", ALL_HOSTS[host].netns, "qdisc", "show", "dev", dev], capture_output=True,
                          text=True).stdout  # fmt: skip


LINE_RATE = "rate 1Gbit"  # what every healthy lab rail carries (sparkctl_lab/shaping.py RAIL_MBPS)


def test_every_rail_carries_the_labs_line_rate_and_lab_up_caps_a_bare_one(lab_faults):
    from sparkctl_lab import shaping
    from sparkctl_lab.topology import cables

    lab = lab_faults
    assert shaping.RAIL_MBPS == 1000
    for c in cables(lab.HOSTS):
        assert LINE_RATE in qdisc(c.a, c.a_nic.device) and LINE_RATE in qdisc(c.b, c.b_nic.device), (c.a, c.a_nic.device)
    # one end left bare (what a test's own `tc qdisc del` leaves): `lab up` caps that rail again, once
    subprocess.run(["tc", "-n", ALL_HOSTS["worker"].netns, "qdisc", "del", "dev", "enP2p1s0f0np0", "root"], check=True)
    assert "tbf" not in qdisc("worker", "enP2p1s0f0np0")
    doc = lab.up()
    assert "head/enP2p1s0f0np0<->worker/enP2p1s0f0np0 at 1000 Mb/s" in doc["changes"], doc["changes"]
    assert LINE_RATE in qdisc("worker", "enP2p1s0f0np0") and LINE_RATE in qdisc("head", "enP2p1s0f0np0")
    assert lab.up()["changed"] is False


def test_degraded_rail_is_shaped_and_reports_its_nominal_speed(lab_faults):
    lab = lab_faults
    lab.fault("head", "degraded-speed", "enp1s0f0np0")  # the ~13 Gb/s ConnectX-7 of PR #108
    # what a real capped CX-7 shows: the nominal speed, everywhere a tool looks
    assert "Speed: 200000Mb/s" in out(lab, "head", "ethtool enp1s0f0np0")
    assert out(lab, "head", "cat /sys/class/net/enp1s0f0np0/speed").strip() == "200000"
    # and its traffic capped both ways: a lower cap on each end of the veth, the twin's unchanged
    assert "rate 250Mbit" in qdisc("head", "enp1s0f0np0") and "rate 250Mbit" in qdisc("worker", "enp1s0f0np0")
    assert LINE_RATE in qdisc("head", "enP2p1s0f0np0")
    assert any("degraded enp1s0f0np0 (carries 250 Mb/s" in f for f in lab.status()["faults"])
    lab.fault("head", "speed", "enp1s0f0np0", clear=True)
    assert LINE_RATE in qdisc("head", "enp1s0f0np0") and LINE_RATE in qdisc("worker", "enp1s0f0np0")


def test_rdma_port_down_keeps_the_netdev_up(lab_faults):
    lab = lab_faults
    lab.fault("worker", "rdma-down", "roceP2p1s0f0")
    assert rdma_state(lab, "worker", "roceP2p1s0f0") == "1: DOWN"
    assert "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)" in out(lab, "worker", "ibdev2netdev")
    assert "port 1 (DOWN  ) ==> enP2p1s0f0np0 (Up)" in out(lab, "worker", "ibdev2netdev -v | grep roceP2p1s0f0")  # printf %-6s
    lab.clear_faults()
    assert rdma_state(lab, "worker", "roceP2p1s0f0") == "4: ACTIVE"


def test_gpu_missing(lab_faults):
    lab = lab_faults
    lab.fault("offload", "gpu-missing", "1")
    assert out(lab, "offload", "nvidia-smi -L").count("GPU ") == 1
    lab.fault("head", "gpu-missing")
    r = lab.host_exec("head", ["nvidia-smi"])
    assert r.returncode == 6 and r.stdout.strip() == "No devices were found"
    r = lab.host_exec("head", ["nvidia-smi", "--query-gpu=name", "--format=csv"])
    assert r.returncode == 6
    lab.clear_faults()
    assert out(lab, "offload", "nvidia-smi -L").count("GPU ") == 2
    assert lab.host_exec("head", ["nvidia-smi"]).returncode == 0


def test_wrong_driver_on_one_spark(lab_faults):
    lab = lab_faults
    q = "nvidia-smi --query-gpu=driver_version --format=csv,noheader"
    lab.fault("worker", "driver", value="580.82.09")
    assert out(lab, "worker", q).strip() == "580.82.09"
    assert out(lab, "head", q).strip() == "580.95.05"
    lab.clear_faults()
    assert out(lab, "worker", q).strip() == "580.95.05"


def test_foreign_process_holding_gpu_memory(lab_faults):
    lab = lab_faults
    q = "nvidia-smi --query-compute-apps=pid,process_name,used_memory --format=csv,noheader,nounits"
    assert out(lab, "offload", q) == ""
    view = lab.fault("offload", "gpu-process", "1", value=4096)
    pid = view["faults"]["gpu-process"][0]["pid"]
    assert out(lab, "offload", q).strip() == f"{pid}, python3, 4096"
    used = out(lab, "offload", "nvidia-smi --query-gpu=memory.used --format=csv,noheader,nounits").split()
    assert used == ["1", "4097"]
    assert lab.host_exec("offload", ["kill", "-0", str(pid)]).returncode == 0  # a real process in the host
    lab.clear_faults()
    assert out(lab, "offload", q) == ""
    assert lab.host_exec("offload", ["kill", "-0", str(pid)]).returncode != 0


def test_fault_cli(lab_faults):
    lab = lab_faults
    cli = [sys.executable, "-m", "sparkctl", "lab", "fault"]
    r = subprocess.run(cli + ["head", "speed", "enp1s0f0np0", "--value", "400"], capture_output=True, text=True)
    assert r.returncode == 0, r.stderr
    assert "rate 400Mbit" in qdisc("head", "enp1s0f0np0")
    r = subprocess.run(cli + ["head", "speed", "enp1s0f0np0", "--clear"], capture_output=True, text=True)
    assert r.returncode == 0 and LINE_RATE in qdisc("head", "enp1s0f0np0")
    r = subprocess.run(cli + ["nosuchhost", "speed", "x"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown lab host" in r.stderr and "Traceback" not in r.stderr
    r = subprocess.run(cli + ["head", "melt"], capture_output=True, text=True)
    assert r.returncode == 2 and "unknown fault kind" in r.stderr
    r = subprocess.run(cli + ["head", "link-down", "eth9"], capture_output=True, text=True)
    assert r.returncode == 2 and "no device" in r.stderr
    subprocess.run(cli + ["worker", "link-down", "enp1s0f1np1"], check=True, capture_output=True)
    assert "(Down)" in out(lab, "worker", "ibdev2netdev | grep enp1s0f1np1")
    r = subprocess.run(cli + ["--clear-all"], capture_output=True, text=True)
    assert r.returncode == 0 and "worker/enp1s0f1np1 up" in r.stdout
    assert lab.status()["faults"] == []
