"""Each lab host is its own machine: real sshd and dockerd, own /etc, /root, /run, hostname, PID 1."""

from __future__ import annotations

import json
import os
import shutil
import subprocess

import paramiko
import pytest

pytestmark = pytest.mark.lab

HOSTS = {"head": "10.231.0.11", "worker": "10.231.0.12", "offload": "10.231.0.13"}


def paramiko_run(lab, address: str, command: str) -> str:
    client = paramiko.SSHClient()
    client.load_host_keys(str(lab.KNOWN_HOSTS))
    client.set_missing_host_key_policy(paramiko.RejectPolicy())  # strict: the lab's known_hosts only
    client.connect(address, username="root", key_filename=str(lab.SSH_KEY), look_for_keys=False, allow_agent=False, timeout=5)
    try:
        _, out, err = client.exec_command(command, timeout=10)
        return out.read().decode()
    finally:
        client.close()


@pytest.mark.parametrize("name", HOSTS)
def test_sshd_answers_with_the_known_host_key(lab, name):
    assert paramiko_run(lab, HOSTS[name], "hostname").strip() == name


@pytest.mark.parametrize("name", HOSTS)
def test_openssh_with_the_lab_config_reaches_host_by_name(lab, name):
    r = subprocess.run(
        ["ssh", "-F", str(lab.SSH_CONFIG), name, "cat /etc/hostname; id -u"], capture_output=True, text=True, timeout=20
    )
    assert r.returncode == 0, r.stderr
    assert r.stdout.split() == [name, "0"]


def test_each_host_runs_its_own_dockerd(lab):
    ids = {}
    for name in HOSTS:
        r = subprocess.run(
            ["docker", "-H", f"unix://{lab.docker_socket(name)}", "info", "--format", "{{json .}}"],
            capture_output=True,
            text=True,
            timeout=30,
        )
        assert r.returncode == 0, r.stderr
        info = json.loads(r.stdout)
        assert info["Name"] == name
        assert info["DockerRootDir"] == f"{lab.LAB_DIR}/hosts/{name}/docker"
        assert "10.231.0.1:5000" in json.dumps(info["RegistryConfig"])
        ids[name] = info["ID"]
    assert len(set(ids.values())) == 3


def test_docker_inside_a_host_is_that_hosts_engine(lab):
    for name in HOSTS:
        r = lab.host_exec(name, ["docker", "info", "--format", "{{.Name}}"])
        assert r.stdout.strip() == name, r.stderr


def test_etc_and_root_are_per_host_and_the_real_machine_is_untouched(lab):
    real_hostname = open("/etc/hostname").read()
    for name in HOSTS:
        assert lab.host_exec(name, ["cat", "/etc/hostname"]).stdout.strip() == name
        assert lab.host_exec(name, ["hostname"]).stdout.strip() == name
        assert "sparkctl lab host" in lab.host_exec(name, ["cat", "/etc/ssh/sshd_config"]).stdout
        assert "10.231.0.1:5000" in lab.host_exec(name, ["cat", "/etc/docker/daemon.json"]).stdout
        keys = lab.host_exec(name, ["cat", "/root/.ssh/authorized_keys"]).stdout
        assert keys.strip() == (lab.SSH_KEY.parent / "id_ed25519.pub").read_text().strip()
    # a change on one host stays on that host
    lab.host_exec("head", ["sh", "-c", "echo probe > /etc/sparkctl-lab-probe"], check=True)
    try:
        assert lab.host_exec("worker", ["cat", "/etc/sparkctl-lab-probe"]).returncode != 0
        assert not os.path.exists("/etc/sparkctl-lab-probe")
    finally:
        lab.host_exec("head", ["rm", "-f", "/etc/sparkctl-lab-probe"])
    assert open("/etc/hostname").read() == real_hostname


def test_host_pid_1_is_the_lab_init_and_run_is_private(lab):
    for name in HOSTS:
        comm = lab.host_exec(name, ["cat", "/proc/1/cmdline"]).stdout.split("\0")
        assert "sparkctl_lab.hostinit" in comm and name in comm
        sock = lab.host_exec(name, ["ls", "/run/docker.sock", "/run/sshd.pid"])
        assert sock.returncode == 0, sock.stderr


def test_simulated_tools_are_not_on_the_real_machines_path(lab):
    real = shutil.which("nvidia-smi")
    if real is not None:
        assert "sparkctl lab" not in open(real, errors="replace").read()
    assert shutil.which("ibdev2netdev") is None or "sparkctl lab" not in open(shutil.which("ibdev2netdev")).read()


def test_hosts_reach_each_other_over_the_fabric_with_strict_host_keys(lab):
    # e.g. `docker save | ssh worker docker load` over the fabric, as people copy images between Sparks
    for src, address, name in (
        ("head", "10.231.100.3", "worker"),
        ("head", "10.231.101.3", "worker"),
        ("worker", "10.231.111.4", "offload"),
        ("offload", "10.231.110.2", "head"),
    ):
        r = lab.host_exec(src, ["ssh", "-o", "BatchMode=yes", "-o", "StrictHostKeyChecking=yes", address, "hostname"], timeout=30)
        assert (r.returncode, r.stdout.strip()) == (0, name), r.stderr


def test_known_hosts_names_each_host_by_name_management_and_fabric_ips(lab):
    lines = {ln.split()[0]: ln.split()[1:] for ln in lab.KNOWN_HOSTS.read_text().splitlines()}
    assert set(lines) == {
        "head,10.231.0.11,10.231.100.2,10.231.101.2,10.231.110.2",
        "worker,10.231.0.12,10.231.100.3,10.231.101.3,10.231.111.3",
        "offload,10.231.0.13,10.231.110.4,10.231.111.4",
    }
    for names, (kind, blob) in lines.items():
        host = names.split(",")[0]
        served = lab.host_exec(host, ["cat", "/etc/ssh/ssh_host_ed25519_key.pub"]).stdout.split()
        assert served[:2] == [kind, blob]


def test_node_state_folders_are_per_host(lab):
    # what sparkctl keeps on a node (caches, Engram target) must not be shared between "machines"
    for d in ("/var/lib/sparkctl", "/srv", "/mnt"):
        lab.host_exec("head", ["sh", "-c", f"mkdir -p {d} && echo head > {d}/.lab-probe"], check=True)
        try:
            assert lab.host_exec("worker", ["cat", f"{d}/.lab-probe"]).returncode != 0, d
            assert not os.path.exists(f"{d}/.lab-probe"), d
        finally:
            lab.host_exec("head", ["rm", "-f", f"{d}/.lab-probe"])


def test_offload_host_has_the_engram_tables_on_disk(lab):
    src = "/srv/engram/tables"
    r = lab.host_exec("offload", ["sh", "-c", f"cd {src} && sha256sum -c SHA256SUMS && du -cb *.bin | tail -1"])
    assert r.returncode == 0, r.stderr
    assert int(r.stdout.split()[-2]) == int(0.25 * (1 << 30))  # inventory engram.size_gib
    assert lab.host_exec("offload", ["touch", f"{src}/x"]).returncode != 0  # a source, read-only
    assert lab.host_exec("head", ["ls", src]).returncode != 0  # only on the offload host
