"""The simulated hardware answers like the real tools, per host."""

from __future__ import annotations

import pytest

pytestmark = pytest.mark.lab

SPARK_RAILS = {
    "enp1s0f0np0": ("rocep1s0f0", 200000),
    "enP2p1s0f0np0": ("roceP2p1s0f0", 200000),
    "enp1s0f1np1": ("rocep1s0f1", 40000),
}
OFFLOAD_RAILS = {"enp65s0f0np0": ("mlx5_0", 40000), "enp65s0f1np1": ("mlx5_1", 40000)}


def sh(lab, host: str, cmd: str) -> str:
    r = lab.host_exec(host, ["sh", "-c", cmd])
    assert r.returncode == 0, (host, cmd, r.stdout, r.stderr)
    return r.stdout


def test_nvidia_smi_on_the_sparks_shows_one_gb10_with_the_same_driver(lab):
    drivers = set()
    for host in ("head", "worker"):
        assert sh(lab, host, "nvidia-smi -L").startswith("GPU 0: NVIDIA GB10 (UUID: GPU-")
        rows = (
            sh(lab, host, "nvidia-smi --query-gpu=name,driver_version,memory.total,index,pci.bus_id --format=csv,noheader")
            .strip()
            .splitlines()
        )
        assert len(rows) == 1
        name, driver, mem, index, bus = [c.strip() for c in rows[0].split(",")]
        assert (name, mem, index, bus) == ("NVIDIA GB10", "[N/A]", "0", "0000000F:01:00.0")  # unified memory
        drivers.add(driver)
        table = sh(lab, host, "nvidia-smi")
        assert f"Driver Version: {driver}" in table and "NVIDIA GB10" in table and "No running processes" in table
    assert drivers == {"580.95.05"}


def test_nvidia_smi_on_the_offload_host_shows_two_3090s(lab):
    out = sh(lab, "offload", "nvidia-smi --query-gpu=index,name,memory.total,memory.used,uuid --format=csv")
    header, *rows = out.strip().splitlines()
    assert header == "index, name, memory.total [MiB], memory.used [MiB], uuid"
    assert [r.split(", ")[:3] for r in rows] == [
        ["0", "NVIDIA GeForce RTX 3090", "24576 MiB"],
        ["1", "NVIDIA GeForce RTX 3090", "24576 MiB"],
    ]
    assert len({r.split(", ")[4] for r in rows}) == 2
    nounits = sh(lab, "offload", "nvidia-smi --query-gpu=memory.total --format=csv,noheader,nounits")
    assert nounits.split() == ["24576", "24576"]
    assert sh(lab, "offload", "nvidia-smi --query-compute-apps=pid,used_memory --format=csv") == "pid, used_gpu_memory [MiB]\n"


def test_nvidia_smi_rejects_unknown_fields_like_the_real_one(lab):
    r = lab.host_exec("head", ["nvidia-smi", "--query-gpu=bogus", "--format=csv"])
    assert r.returncode == 2 and 'Field "bogus" is not a valid field to query.' in r.stdout


def test_ibdev2netdev_maps_each_rdma_device_to_its_netdev(lab):
    # like a real Spark (NVIDIA's connect-two-sparks README): all four ConnectX-7 functions, in `ls`
    # order; the one the lab does not cable, enP2p1s0f1np1 (port 1's second twin), is Down
    for host in ("head", "worker"):
        assert sh(lab, host, "ibdev2netdev").splitlines() == [
            "roceP2p1s0f0 port 1 ==> enP2p1s0f0np0 (Up)",
            "roceP2p1s0f1 port 1 ==> enP2p1s0f1np1 (Down)",
            "rocep1s0f0 port 1 ==> enp1s0f0np0 (Up)",
            "rocep1s0f1 port 1 ==> enp1s0f1np1 (Up)",
        ]
    lines = set(sh(lab, "offload", "ibdev2netdev").splitlines())
    assert lines == {f"{rdma} port 1 ==> {dev} (Up)" for dev, (rdma, _) in OFFLOAD_RAILS.items()}
    # -v: bus id, adapter, firmware and the RDMA port state padded as the script's printf "%-6s" does
    verbose = sh(lab, "head", "ibdev2netdev -v").splitlines()
    assert verbose[0].startswith("0002:01:00.0 roceP2p1s0f0 (MT4129 - ") and verbose[0].endswith(
        "port 1 (ACTIVE) ==> enP2p1s0f0np0 (Up)"
    )
    assert verbose[1].endswith("port 1 (DOWN  ) ==> enP2p1s0f1np1 (Down)")


def test_link_speed_in_ethtool_and_sysfs(lab):
    for host, rails in (("head", SPARK_RAILS), ("offload", OFFLOAD_RAILS)):
        for dev, (rdma, mbps) in rails.items():
            assert f"Speed: {mbps}Mb/s" in sh(lab, host, f"ethtool {dev}")
            assert sh(lab, host, f"cat /sys/class/net/{dev}/speed").strip() == str(mbps)
            assert sh(lab, host, f"cat /sys/class/infiniband/{rdma}/ports/1/state").strip() == "4: ACTIVE"
    assert "Speed: 10000Mb/s" in sh(lab, "worker", "ethtool enP7s7")


def test_sysfs_is_the_hosts_own_and_cgroups_survive(lab):
    nets = set(sh(lab, "head", "ls /sys/class/net").split())
    assert nets == {"lo", "enP7s7", *SPARK_RAILS}
    assert sh(lab, "head", "ls /sys/fs/cgroup").split().count("devices") == 1


def test_gpus_and_rdma_devices_reach_containers_with_the_real_flags(lab):
    from sparkctl_lab.topology import IMAGE

    r = lab.host_exec(
        "worker",
        [
            "docker",
            "run",
            "--rm",
            "--network",
            "host",
            "--ipc",
            "host",
            "--gpus",
            "all",
            "--device",
            "/dev/infiniband",
            IMAGE,
            "sh",
            "-c",
            "ls /dev/infiniband; echo NVIDIA_VISIBLE_DEVICES=$NVIDIA_VISIBLE_DEVICES",
        ],
        timeout=120,
    )
    assert r.returncode == 0, r.stderr
    assert "uverbs0" in r.stdout.split() and "NVIDIA_VISIBLE_DEVICES=all" in r.stdout
