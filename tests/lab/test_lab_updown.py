"""Refusals, and a full down/up cycle that leaves nothing behind.

Ordered after every other test of the session (tests/conftest.py), and it leaves the lab up.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from sparkctl_lab.paths import PREFIX, other_labs
from sparkctl_lab.topology import ALL_SUBNETS, RUNNER_DEVICE, RUNNER_DEVICES, SUBNETS, net

pytestmark = pytest.mark.lab

CLI = [sys.executable, "-m", "sparkctl", "lab"]


def test_refuses_clearly_when_not_root(lab):
    # a user namespace without a mapping: same files, but euid is not 0
    for verb in ("up", "down", "status"):
        r = subprocess.run(["unshare", "--user", *CLI, verb], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2, (verb, r.stderr)
        assert "needs root" in r.stderr and "fix:" in r.stderr and "Traceback" not in r.stderr


def test_refuses_when_the_range_is_routed_by_someone_else(lab):
    from sparkctl.errors import InputError

    # a range inside this lab's and clear of any other lab's on the machine
    foreign = f"{net(1, 0)}/24"
    subprocess.run(["ip", "route", "add", "blackhole", foreign], check=True)
    try:
        with pytest.raises(InputError) as err:
            lab.up()
        assert foreign in err.value.message and err.value.fix
        r = subprocess.run([*CLI, "up"], capture_output=True, text=True, timeout=60)
        assert r.returncode == 2 and "already routed" in r.stderr
    finally:
        subprocess.run(["ip", "route", "del", "blackhole", foreign], check=True)
    assert lab.status()["up"]  # refusing touched nothing


def test_cgroup_v2_only_is_recognised():
    from sparkctl_lab.preflight import cgroup_mode

    v2 = "35 24 0:30 / /sys/fs/cgroup rw,nosuid shared:9 - cgroup2 cgroup2 rw,nsdelegate\n"
    v1 = "40 30 0:35 / /sys/fs/cgroup/devices rw shared:16 - cgroup cgroup rw,devices\n" + v2
    assert cgroup_mode(v2) == "v2"
    assert cgroup_mode(v1) == "v1"
    with open("/proc/self/mountinfo") as f:
        assert cgroup_mode(f.read()) == "v1"  # what this machine (and CI's) has


def _of_this_lab(pid: str, lab_dir: Path) -> bool:
    try:
        return f"SPARKCTL_LAB_DIR={lab_dir}" in open(f"/proc/{pid}/environ", "rb").read().decode(errors="replace").split("\0")
    except OSError:
        return False


def _other_labs_route(line: str) -> bool:
    """A route another lab on this machine made (SPARKCTL_LAB_INSTANCE): its runner device or range."""
    return any(d in line.split() for d in RUNNER_DEVICES if d != RUNNER_DEVICE) or any(
        line.split()[1:2] == [s] for s in ALL_SUBNETS if s not in SUBNETS
    )


def _leftovers(lab_dir: Path) -> dict:
    netns = subprocess.run(["ip", "netns", "list"], capture_output=True, text=True).stdout
    procs = []
    for pid in filter(str.isdigit, os.listdir("/proc")):
        try:
            cmd = open(f"/proc/{pid}/cmdline", "rb").read().replace(b"\0", b" ").decode()
        except OSError:
            continue
        if re.search(re.escape(str(lab_dir)) + r"(/|\s|$)", cmd) or (
            "sparkctl_lab.hostinit" in cmd and _of_this_lab(pid, lab_dir)
        ):
            procs.append(cmd)
    others = os.listdir("/run/netns") if os.path.isdir("/run/netns") else []
    mounts = [
        ln
        for ln in open("/proc/self/mountinfo")
        if re.search(re.escape(str(lab_dir)) + r"(/|\s|$)", ln)
        or f"/run/netns/{PREFIX}-" in ln
        or (not others and ln.split()[4] == "/run/netns")
    ]  # iproute2's own mount goes when empty
    routes = subprocess.run(["ip", "route", "show", "table", "all"], capture_output=True, text=True).stdout
    links = subprocess.run(["ip", "-br", "link"], capture_output=True, text=True).stdout
    cgroups = [str(p) for p in Path("/sys/fs/cgroup").glob(f"*/**/sparkctl-{PREFIX}-*")]  # this lab's (hostfiles.daemon_json)
    return {
        "netns": [ln for ln in netns.splitlines() if ln.startswith(f"{PREFIX}-")],
        "processes": procs,
        "mounts": mounts,
        "routes": [ln for ln in routes.splitlines() if "10.231." in ln and not _other_labs_route(ln)],
        "links": [ln for ln in links.splitlines() if ln.startswith(RUNNER_DEVICE)],
        "cgroups": cgroups,
        "lab_dir": lab_dir.exists(),
        # (kept while another lab is up: its hosts mount their own over it)
        "node_dirs": os.path.exists("/var/lib/sparkctl") and not other_labs(),
    }


def test_down_leaves_nothing_behind_and_up_brings_it_all_back(lab):
    lab_dir = lab.LAB_DIR
    # a running container on a host must not slow the teardown down (it is killed first)
    r = lab.host_exec("head", ["docker", "run", "-d", "--network", "host", lab.IMAGE, "sleep", "600"], timeout=120)
    assert r.returncode == 0, r.stderr
    lab.up(clusters=2)  # down takes every pair, whatever the lab's count (the fresh lab after has one)
    r = subprocess.run([*CLI, "down", "--json"], capture_output=True, text=True, timeout=120)
    try:
        assert r.returncode == 0, r.stderr
        assert "hosts stopped: head, worker, offload, head2, worker2" in json.loads(r.stdout)["changes"]
        assert _leftovers(lab_dir) == {
            "netns": [],
            "processes": [],
            "mounts": [],
            "routes": [],
            "links": [],
            "cgroups": [],
            "lab_dir": False,
            "node_dirs": False,
        }
        again = subprocess.run([*CLI, "down", "--json"], capture_output=True, text=True, timeout=60)
        assert json.loads(again.stdout)["changed"] is False
        st = subprocess.run([*CLI, "status", "--json"], capture_output=True, text=True, timeout=60)
        assert st.returncode == 1 and json.loads(st.stdout)["up"] is False
    finally:  # whatever failed above, the lab comes back up: the tests after this one need it
        r = subprocess.run([*CLI, "up", "--json"], capture_output=True, text=True, timeout=300)
    assert r.returncode == 0, r.stderr
    assert json.loads(r.stdout)["changed"] is True
    status = lab.status()
    assert status["up"], status
    assert status["clusters"] == 1 and list(status["hosts"]) == ["head", "worker", "offload"]
    # host identities survive a down/up (keys are kept with the caches)
    assert lab.KNOWN_HOSTS.exists() and lab.host_exec("worker", ["hostname"]).stdout.strip() == "worker"


def test_up_restarts_a_host_whose_dockerd_died(lab):
    lab.host_exec("worker", ["sh", "-c", "kill -9 $(pidof dockerd)"], check=True)
    result = lab.up()
    assert "host worker restarted (sshd or dockerd was not answering)" in result["changes"]
    assert lab.status()["hosts"]["worker"]["dockerd"]["healthy"]
    assert lab.up()["changed"] is False
